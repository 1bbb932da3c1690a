// Package shared locates the project's shared test material (real COCO
// images, reference goldens, architecture specs), which lives beside the
// repository as ../shared relative to the directory holding go.mod.
//
// Tests that need it call Path or Dir, which skip the test when the
// material is absent: the suite must pass on a clone without it.
package shared

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the shared directory, skipping tb when it is absent.
func Dir(tb testing.TB) string {
	tb.Helper()
	return Path(tb, "")
}

// Path returns ../shared/rel relative to the repository root, skipping tb
// when the repository root or that path cannot be found.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("no go.mod above the test directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared material %s absent: %v", p, err)
	}
	return p
}
