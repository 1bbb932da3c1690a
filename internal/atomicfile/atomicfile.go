// Package atomicfile writes files that appear whole or not at all.
//
// A File is a temporary file in the destination's directory; Commit flushes
// it to stable storage, renames it over the destination and flushes the
// directory, so that after a crash the destination holds either its old
// content or the complete new one, never a prefix. Every file the project
// persists (shards, manifests, journals, checkpoints, run state, generated
// datasets) is written through this package.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File is a pending atomic write. It is an io.Writer; nothing is visible at
// the destination until Commit returns nil. Call Abort (safe after Commit)
// in a defer to remove the temporary file on every error path.
type File struct {
	f    *os.File
	path string
	done bool
}

// Create starts an atomic write of path with permissions perm, applied
// exactly (temporary files start as 0600, and the umask is not applied).
func Create(path string, perm os.FileMode) (*File, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &File{f: f, path: path}, nil
}

// Write appends p to the pending file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// TempName is the temporary file's path (for diagnostics and for writers
// that must reopen it).
func (f *File) TempName() string { return f.f.Name() }

// Commit syncs and closes the temporary file, renames it over the
// destination and syncs the directory. On error the temporary file is
// removed and the destination is unchanged.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: commit after commit or abort")
	}
	f.done = true
	tmp := f.f.Name()
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort discards the pending write. It is a no-op after Commit or Abort.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// WriteFile makes path hold b, atomically, with permissions perm.
func WriteFile(path string, b []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}

// SyncDir flushes a directory's entries (renames, removals) to disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
