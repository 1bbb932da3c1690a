package cli

import (
	"path/filepath"
	"testing"
)

func TestAbsPathKeepsURLs(t *testing.T) {
	for _, u := range []string{"s3://bkt/coco/train?region=eu-west-1", "gs://b/p", "azblob://c/p", "file:///data/shards"} {
		if got := absPath(u); got != u {
			t.Errorf("absPath(%q) = %q, want it unchanged", u, got)
		}
	}
	if got, want := absPath("shards/val"), mustAbs(t, "shards/val"); got != want {
		t.Errorf("absPath of a relative path = %q, want %q", got, want)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
