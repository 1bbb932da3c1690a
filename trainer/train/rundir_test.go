package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
)

// A run directory settles the config once: a fresh run takes the options'
// config and categories, a resumed one its config.json whatever the
// options say; bad configs are refused before anything is written.
func TestRunDirConfig(t *testing.T) {
	cats := []shard.Category{{ID: 1, Name: "a"}, {ID: 2, Name: "b"}}
	dir := filepath.Join(t.TempDir(), "run")
	cfg := tinyConfig(3)
	d, err := openRunDir(Options{Config: cfg, Categories: cats, Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg.Classes != 2 {
		t.Errorf("classes %d, want the category table's 2", d.cfg.Classes)
	}
	if err := d.mkdir(); err != nil {
		t.Fatal(err)
	}
	if err := d.create(); err != nil {
		t.Fatal(err)
	}
	other := tinyConfig(7)
	r, err := openRunDir(Options{Config: other, Out: dir, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Epochs != 3 || len(r.cats) != 2 || string(r.meta) != string(d.meta) {
		t.Errorf("resumed config: %d epochs, %d categories, meta equal %v; want config.json's", r.cfg.Epochs, len(r.cats), string(r.meta) == string(d.meta))
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.create(); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("create over a run: %v", err)
	}

	bad := tinyConfig(1)
	bad.Classes = 3
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"no directory", Options{Config: cfg, Categories: cats}, "no run directory"},
		{"no classes", Options{Config: cfg, Out: t.TempDir()}, "class count unknown"},
		{"classes against categories", Options{Config: bad, Categories: cats, Out: t.TempDir()}, "3 classes, the category table 2"},
		{"resume without a run", Options{Config: cfg, Out: t.TempDir(), Resume: true}, "resume"},
	} {
		if _, err := openRunDir(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
