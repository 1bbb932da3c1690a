package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	for _, content := range []string{"first", "second, longer", ""} {
		if err := WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
			t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
		}
	}
	assertOnly(t, dir, "a.json")
}

func TestAbortLeavesDestination(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("partial new content")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("destination changed before commit: %q", got)
	}
	f.Abort()
	f.Abort() // idempotent
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("destination changed by abort: %q", got)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("commit after abort succeeded")
	}
	assertOnly(t, dir, "x")
}

func TestCommitIntoMissingDirectoryFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "x")
	if err := WriteFile(p, []byte("x"), 0o644); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// assertOnly fails unless dir holds exactly the named entries (no
// temporary files left behind).
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(names) {
		t.Fatalf("directory holds %d entries, want %v", len(es), names)
	}
	for i, e := range es {
		if e.Name() != names[i] {
			t.Fatalf("entry %q, want %q", e.Name(), names[i])
		}
	}
}
