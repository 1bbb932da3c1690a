//go:build pqarrow_read_only

package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
)

// TestReadOnlyBuildRefusesWrites: in the read-only build every command
// that writes shards, with or without its flags, is a usage error that
// names the full build, and touches nothing (no --out is created); its
// help still prints and says so.
func TestReadOnlyBuildRefusesWrites(t *testing.T) {
	out := filepath.Join(t.TempDir(), "shards")
	tests := []struct {
		name string
		args []string
	}{
		{"convert coco", []string{"convert", "coco", "--annotations", "a.json", "--images", "imgs", "--out", out}},
		{"convert yolo", []string{"convert", "yolo", "--data", "data.yaml", "--out", out}},
		{"convert yolo without flags", []string{"convert", "yolo"}},
		{"quickstart", []string{"quickstart", "--dir", out}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := run(t, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d (usage)\n%s", code, ExitUsage, errs)
			}
			for _, want := range []string{"read-only build", "pqarrow_read_only", "full segpipe build"} {
				if !strings.Contains(errs, want) {
					t.Errorf("stderr %q does not say %q", errs, want)
				}
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--out %s exists after a refused write (stat: %v)", out, err)
			}
		})
	}
	code, stdout, errs := run(t, "convert", "coco", "--help")
	if code != ExitOK || !strings.Contains(stdout, "--annotations") {
		t.Errorf("convert coco --help: exit %d, want %d and the flags\n%s%s", code, ExitOK, stdout, errs)
	}
	if code, stdout, _ := run(t, "--help"); code != ExitOK || !strings.Contains(stdout, "not in this read-only build") {
		t.Errorf("--help: exit %d, want %d and convert marked as not in this build\n%s", code, ExitOK, stdout)
	}
}

// TestReadOnlyBuildWriterRefuses: a Go program built read-only that
// writes shards through the library gets shard.ErrReadOnly, not a
// half-written shard.
func TestReadOnlyBuildWriterRefuses(t *testing.T) {
	w, err := shard.Create(filepath.Join(t.TempDir(), "out"), shard.WriterOptions{})
	if err == nil {
		err = w.Write(&shard.Image{ImageID: 1, FileName: "a.jpg", Width: 1, Height: 1, Format: shard.FormatJPEG, Bytes: []byte{0xff, 0xd8}})
		if err == nil {
			_, err = w.Close(nil)
		}
		if err != nil {
			w.Abort()
		}
	}
	if !errors.Is(err, shard.ErrReadOnly) {
		t.Fatalf("writing a shard in the read-only build: %v, want shard.ErrReadOnly", err)
	}
}
