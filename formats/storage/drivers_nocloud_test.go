//go:build nocloud

package storage

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestSmallBuildRefusesBuckets: in a build without the cloud drivers, a
// bucket URL of every scheme parses but opening it fails with an error
// that names the scheme, says which build this is and which one has the
// driver; local directories still open.
func TestSmallBuildRefusesBuckets(t *testing.T) {
	if d := Drivers(); len(d) != 0 {
		t.Fatalf("Drivers() = %q in a nocloud build, want none", d)
	}
	tests := []struct {
		loc    string
		scheme string
	}{
		{"s3://bkt/coco/val?region=eu-west-1", "s3"},
		{"gs://bkt/coco", "gs"},
		{"azblob://container/coco/train", "azblob"},
	}
	for _, tc := range tests {
		t.Run(tc.scheme, func(t *testing.T) {
			if _, err := ParseLocation(tc.loc); err != nil {
				t.Fatalf("ParseLocation(%q): %v", tc.loc, err)
			}
			d, err := Open(context.Background(), tc.loc, nil)
			if err == nil {
				d.Close()
				t.Fatalf("Open(%q) succeeded in a nocloud build", tc.loc)
			}
			if !errors.Is(err, ErrNoDriver) {
				t.Errorf("Open(%q) = %v, want an error wrapping ErrNoDriver", tc.loc, err)
			}
			for _, want := range []string{tc.scheme + ":// needs the cloud storage drivers", "small build", "nocloud", "use the default build"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open(%q) error %q does not say %q", tc.loc, err, want)
				}
			}
		})
	}
	d, err := Open(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatalf("local directory in a nocloud build: %v", err)
	}
	d.Close()
}
