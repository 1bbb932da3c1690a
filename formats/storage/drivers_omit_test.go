//go:build !nocloud

package storage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// checkOmitted asserts that, in a build whose tag left out the driver of
// scheme, a URL of that scheme parses, is refused on Open with an error
// that names the scheme, the tag and both ways to get the driver, and is
// not listed by Drivers, while S3 and local directories still open.
func checkOmitted(t *testing.T, scheme, tag string) {
	t.Helper()
	if d := Drivers(); slices.Contains(d, scheme) || !slices.Contains(d, "s3") {
		t.Fatalf("Drivers() = %q with -tags %s: want s3 and no %s", d, tag, scheme)
	}
	loc := scheme + "://bkt/coco/train"
	if _, err := ParseLocation(loc); err != nil {
		t.Fatalf("ParseLocation(%q): %v", loc, err)
	}
	d, err := Open(context.Background(), loc, nil)
	if err == nil {
		d.Close()
		t.Fatalf("Open(%q) succeeded with -tags %s", loc, tag)
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Errorf("Open(%q) = %v, want an error wrapping ErrNoDriver", loc, err)
	}
	for _, want := range []string{scheme + ":// support is not in this build", "-tags " + tag, "without that tag", "segpipe CLI binary"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) error %q does not say %q", loc, err, want)
		}
	}
	if err := checkDriver("s3"); err != nil {
		t.Errorf("checkDriver(s3) with -tags %s: %v", tag, err)
	}
	l, err := Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatalf("local directory with -tags %s: %v", tag, err)
	}
	l.Close()
}
