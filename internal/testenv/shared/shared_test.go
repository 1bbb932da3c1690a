package shared

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopiesMatchShared holds the module's copy to ../shared: every file
// under a listed path is there, byte for byte, and the copy holds nothing
// else (scripts/sync-goldens.sh --check says the same).
func TestCopiesMatchShared(t *testing.T) {
	mod, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	root := sharedRoot(mod)
	if _, err := os.Stat(root); err != nil {
		absent(t, "shared material %s absent, nothing to compare the copy with: %v", root, err)
		return
	}
	units, err := copied(mod)
	if err != nil {
		t.Fatal(err)
	}
	if len(units) == 0 {
		t.Fatal("copies.txt lists nothing")
	}
	cp := filepath.Join(mod, copyDir)
	want := map[string]bool{"README.md": true, "copies.txt": true}
	for _, u := range units {
		err := filepath.WalkDir(filepath.Join(root, u), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			want[filepath.ToSlash(rel)] = true
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got, err := os.ReadFile(filepath.Join(cp, rel))
			if err != nil {
				t.Errorf("%s: no copy (run scripts/sync-goldens.sh): %v", rel, err)
				return nil
			}
			if !bytes.Equal(got, src) {
				t.Errorf("%s: copy differs from %s (run scripts/sync-goldens.sh)", rel, p)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
	err = filepath.WalkDir(cp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(cp, p)
		if !want[filepath.ToSlash(rel)] {
			t.Errorf("%s is in the copy but not under a path of copies.txt in %s", rel, root)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestResolvePrefersSharedThenCopy: with the material present its own
// path comes back; without it, what copies.txt lists comes from the copy
// and the rest (the coco-tiny images) is absent.
func TestResolvePrefersSharedThenCopy(t *testing.T) {
	mod, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(mod, copyDir)
	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fake, "data", "coco-tiny", "val2017"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, env, rel string
		want           string // "" when absent
	}{
		{"hidden, golden directory", "/nonexistent", "goldens/loss", filepath.Join(cp, "goldens/loss")},
		{"hidden, golden file", "/nonexistent", "goldens/masks/polygon_rle_val2017.json", filepath.Join(cp, "goldens/masks/polygon_rle_val2017.json")},
		{"hidden, spec", "/nonexistent", "specs/yolo26n-seg_state_dict.tsv", filepath.Join(cp, "specs/yolo26n-seg_state_dict.tsv")},
		{"hidden, annotations", "/nonexistent", "data/coco-tiny/annotations/instances_val2017.json", filepath.Join(cp, "data/coco-tiny/annotations/instances_val2017.json")},
		{"hidden, images", "/nonexistent", "data/coco-tiny/val2017", ""},
		{"hidden, dataset holding images", "/nonexistent", "data/coco-tiny", ""},
		{"hidden, unlisted spec", "/nonexistent", "specs/yolo26-seg.md", ""},
		{"hidden, listed path climbed out of", "/nonexistent", "goldens/../data/coco-tiny", ""},
		{"present, images", fake, "data/coco-tiny/val2017", filepath.Join(fake, "data/coco-tiny/val2017")},
		{"present but lacking a golden", fake, "goldens/loss", filepath.Join(cp, "goldens/loss")},
		{"relative to the module root", copyDir, "goldens/cocoeval", filepath.Join(cp, "goldens/cocoeval")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SEGPIPE_SHARED", c.env)
			got, err := resolve(c.rel)
			if c.want == "" {
				if err == nil {
					t.Fatalf("resolve(%q) = %s, want absent", c.rel, got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("resolve(%q) = %q, %v; want %q", c.rel, got, err, c.want)
			}
		})
	}
}

// recorder stands for a test, noting instead of stopping.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skip(a ...any)                  { r.skip = fmt.Sprint(a...) }

// TestAbsentSkipsButFailsUnderCI: a test whose material is missing skips
// on a developer's clone and fails where CI=true.
func TestAbsentSkipsButFailsUnderCI(t *testing.T) {
	t.Setenv("SEGPIPE_SHARED", "/nonexistent")
	for _, c := range []struct {
		ci       string
		rel      string
		wantFail bool
		wantSkip bool
	}{
		{"", "data/coco-tiny/val2017", false, true},
		{"false", "data/coco-tiny/val2017", false, true},
		{"true", "data/coco-tiny/val2017", true, false},
		{"1", "data/coco-tiny", true, false},
		{"true", "goldens/loss", false, false},
	} {
		t.Run(c.ci+"/"+c.rel, func(t *testing.T) {
			t.Setenv("CI", c.ci)
			r := &recorder{TB: t}
			p := Path(r, c.rel)
			if (r.fatal != "") != c.wantFail || (r.skip != "") != c.wantSkip {
				t.Fatalf("CI=%q Path(%q) = %q: failed %q, skipped %q", c.ci, c.rel, p, r.fatal, r.skip)
			}
			if c.wantFail && !strings.Contains(r.fatal, "CI=true requires it") {
				t.Errorf("failure does not say why: %s", r.fatal)
			}
			if !c.wantFail && !c.wantSkip && p == "" {
				t.Errorf("Path(%q) found nothing", c.rel)
			}
		})
	}
}
