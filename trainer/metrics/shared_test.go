package metrics

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedDir returns ../shared relative to the repository root (the
// directory holding go.mod), skipping the test when it is absent.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("repository root not found")
		}
		dir = parent
	}
	s := filepath.Join(dir, "..", "shared")
	if _, err := os.Stat(filepath.Join(s, "goldens")); err != nil {
		t.Skipf("shared fixtures absent: %v", err)
	}
	return s
}
