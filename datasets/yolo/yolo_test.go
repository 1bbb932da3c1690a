package yolo

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
)

var fixtures = filepath.Join("..", "..", "testdata", "yolo")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rows copies every emitted image (minus bytes) out of the reused buffers.
func rows(t *testing.T, d *Dataset) []shard.Image {
	t.Helper()
	var out []shard.Image
	err := d.Images(context.Background(), 0, func(im *shard.Image) error {
		c := *im
		c.Bytes = nil
		c.Instances = nil
		for _, in := range im.Instances {
			var ps [][]float32
			for _, p := range in.Polygons {
				ps = append(ps, append([]float32(nil), p...))
			}
			in.Polygons = ps
			c.Instances = append(c.Instances, in)
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGoodDataset(t *testing.T) {
	d, err := Open(filepath.Join(fixtures, "good", "data.yaml"), "train", Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Categories(); len(got) != 3 || got[2] != (shard.Category{ID: 2, Index: 2, Name: "car"}) || got[1].Name != "bicycle" {
		t.Fatalf("categories %+v", got)
	}
	rs := rows(t, d)
	if len(rs) != 3 || d.Len() != 3 {
		t.Fatalf("%d rows, want 3", len(rs))
	}
	want := []struct {
		id   int64
		name string
		n    int
	}{{1, "images/train/a.png", 2}, {2, "images/train/c.png", 0}, {3, "images/train/sub/b.jpg", 1}}
	for i, w := range want {
		if rs[i].ImageID != w.id || rs[i].FileName != w.name || len(rs[i].Instances) != w.n || rs[i].Width != 16 || rs[i].Height != 12 {
			t.Errorf("row %d: id %d %s, %d instances; want %+v", i, rs[i].ImageID, rs[i].FileName, len(rs[i].Instances), w)
		}
	}
	a := rs[0].Instances
	// Polygon: pixel = float32(v * size).
	if got, want := a[0].Polygons, [][]float32{{float32(0.0625 * 16), float32(0.0833 * 12), 8, float32(0.0833 * 12), 8, 6}}; !reflect.DeepEqual(got, want) {
		t.Errorf("polygon %v, want %v", got, want)
	}
	if a[0].CategoryID != 0 || a[0].Class != 0 || a[0].AnnID != 1 || a[0].BBox != [4]float32{1, float32(0.0833 * 12), 7, 6 - float32(0.0833*12)} {
		t.Errorf("polygon instance %+v", a[0])
	}
	// Box line: the 4-corner polygon, bbox and area w*h.
	if got, want := a[1].Polygons, [][]float32{{6, 3, 10, 3, 10, 9, 6, 9}}; !reflect.DeepEqual(got, want) || a[1].BBox != [4]float32{6, 3, 4, 6} || a[1].Area != 24 || a[1].Class != 2 || a[1].AnnID != 2 {
		t.Errorf("box instance %+v", a[1])
	}
	// Points outside the image are kept.
	if b := rs[2].Instances[0]; rs[2].Format != "jpeg" || b.Polygons[0][8] != float32(1.2*16) || b.Polygons[0][9] != float32(-0.05*12) || b.AnnID != 3 {
		t.Errorf("outside points: %+v", b)
	}
	if st := d.Stats(); st.Images != 3 || st.Backgrounds != 1 || st.Lines != 3 {
		t.Errorf("stats %+v", st)
	}

	v, err := Open(filepath.Join(fixtures, "good", "data.yaml"), "val", Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if rs := rows(t, v); len(rs) != 1 || rs[0].FileName != "images/val/v.png" || len(rs[0].Instances) != 1 {
		t.Errorf("val from a list file: %+v", rs)
	}
	if _, err := Open(filepath.Join(fixtures, "good", "data.yaml"), "test", Options{}); err == nil || !strings.Contains(err.Error(), `no "test" key`) {
		t.Errorf("missing split: %v", err)
	}
}

func TestBadInputFixtures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[string]int64
		msg    string
		rows   int
	}{
		{"odd-length", map[string]int64{"polygon_odd_length": 1}, "a.txt:2 image 1: polygon_odd_length: 5 coordinates", 1},
		{"too-few-points", map[string]int64{"polygon_too_few_points": 1}, "a.txt:2 image 1: polygon_too_few_points", 1},
		{"unknown-class", map[string]int64{"unknown_category_id": 1}, "a.txt:2 image 1: unknown_category_id: class 1 is not in names", 1},
		{"not-a-number", map[string]int64{"invalid_label_line": 1}, `a.txt:2 image 1: invalid_label_line: "zero" is not a number`, 1},
		{"class-not-integer", map[string]int64{"invalid_label_line": 1}, `a.txt:2 image 1: invalid_label_line: class "0.5"`, 1},
		{"nan", map[string]int64{"non_finite_number": 1}, `a.txt:2 image 1: non_finite_number: "nan" is not finite`, 1},
		{"negative-box", map[string]int64{"invalid_bbox": 1}, "a.txt:2 image 1: invalid_bbox: negative size", 1},
		{"class-only", map[string]int64{"invalid_label_line": 1}, "a.txt:2 image 1: invalid_label_line: class without coordinates", 1},
		{"missing-image", map[string]int64{"missing_image_file": 1}, "gone.png image 2: missing_image_file", 1},
		{"corrupt-image", map[string]int64{"corrupt_image": 1}, "z.png image 2: corrupt_image", 1},
		{"unsupported-format", map[string]int64{"unsupported_image_format": 1}, "z.webp image 2: unsupported_image_format", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := filepath.Join(fixtures, "bad-"+tc.name, "data.yaml")
			_, err := Open(yaml, "train", Options{Strict: true, Logger: quiet})
			if err == nil || !errors.Is(err, datasets.ErrBadInput) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("strict: %v, want %q", err, tc.msg)
			}
			d, err := Open(yaml, "train", Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Report().Counts(); !maps.Equal(got, tc.counts) {
				t.Errorf("counts %v, want %v", got, tc.counts)
			}
			rs := rows(t, d)
			if len(rs) != tc.rows || len(rs[0].Instances) != 1 && strings.HasPrefix(tc.msg, "a.txt") {
				t.Errorf("%d rows, first with %d instances; want %d rows, the good line kept", len(rs), len(rs[0].Instances), tc.rows)
			}
		})
	}
	if _, err := Open(filepath.Join(fixtures, "bad-yaml", "data.yaml"), "train", Options{}); err == nil || !strings.Contains(err.Error(), "data.yaml: line 1: flow collection") {
		t.Errorf("bad yaml: %v", err)
	}
}

func TestParseDataYAML(t *testing.T) {
	for _, tc := range []struct {
		text string
		want map[string]yamlValue
		err  string
	}{
		{text: "path: ../datasets/coco8 # root\ntrain: images/train\nnames:\n  0: person\n  1: 'bi cycle'\n",
			want: map[string]yamlValue{"path": {scalar: "../datasets/coco8", line: 1}, "train": {scalar: "images/train", line: 2},
				"names": {isMap: true, keys: []string{"0", "1"}, m: map[string]string{"0": "person", "1": "bi cycle"}, line: 3}}},
		{text: "names:\n- a\n- \"b#c\"\nval: [x, 'y, z']\n",
			want: map[string]yamlValue{"names": {isList: true, list: []string{"a", "b#c"}, line: 1},
				"val": {isList: true, list: []string{"x", "y, z"}, line: 4}}},
		{text: "names: {0: a, 1: b}\n", want: map[string]yamlValue{"names": {isMap: true, keys: []string{"0", "1"}, m: map[string]string{"0": "a", "1": "b"}, line: 1}}},
		{text: "a: 1\na: 2\n", err: "line 2: key \"a\" repeated"},
		{text: "names:\n  - a\n    - b\n", err: "line 3: inconsistent indentation"},
		{text: "  x: 1\n", err: "line 1: unexpected indentation"},
		{text: "x: &anchor 1\n", err: "line 1: anchors"},
		{text: "just text\n", err: "line 1: want \"key: value\""},
		{text: "names: [a, [b]]\n", err: "nested flow"},
	} {
		got, err := parseDataYAML(tc.text)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.text, err)
			continue
		}
		flat := map[string]yamlValue{}
		for k, v := range got {
			flat[k] = *v
		}
		if !reflect.DeepEqual(flat, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.text, flat, tc.want)
		}
	}
}

// A list file whose images are mostly absent names the wrong root or
// split: an error wrapping datasets.ErrImagesNotFound, not an empty
// dataset.
func TestListOfMissingImagesIsAnError(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("list.txt", "images/a.jpg\nimages/b.jpg\nimages/c.jpg\n")
	write("data.yaml", "path: .\ntrain: list.txt\nnames:\n  0: thing\n")
	_, err := Open(filepath.Join(dir, "data.yaml"), "train", Options{Logger: quiet})
	if !errors.Is(err, datasets.ErrImagesNotFound) || !strings.Contains(err.Error(), "a.jpg") {
		t.Fatalf("err = %v, want ErrImagesNotFound naming the first missing image", err)
	}
}

// Images linked into a split directory, or a split directory that is a
// link, are read as the files they name (as Ultralytics' glob reads
// them); a split directory with no image is an error, not an empty set.
func TestLinkedImagesAndEmptySplit(t *testing.T) {
	good, err := filepath.Abs(filepath.Join(fixtures, "good"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(old, new string) {
		if err := os.Symlink(old, filepath.Join(dir, new)); err != nil {
			t.Skip("no symbolic links:", err)
		}
	}
	mk("images/files")
	mk("labels")
	mk("images/empty")
	link(filepath.Join(good, "images/train/a.png"), "images/files/a.png")
	link(filepath.Join(good, "images/train/sub/b.jpg"), "images/files/b.jpg")
	link(filepath.Join(dir, "nowhere.png"), "images/files/dangling.png")
	link(filepath.Join(good, "images/train"), "images/linked")
	link(filepath.Join(good, "labels/train"), "labels/files")
	link(filepath.Join(good, "labels/train"), "labels/linked")
	yaml := "path: .\nfiles: images/files\nlinked: images/linked\nempty: images/empty\nnames:\n  0: a\n  1: b\n  2: car\n"
	if err := os.WriteFile(filepath.Join(dir, "data.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		split string
		want  []string
	}{
		{"files", []string{"images/files/a.png", "images/files/b.jpg"}},
		{"linked", []string{"images/linked/a.png", "images/linked/c.png", "images/linked/sub/b.jpg"}},
	} {
		d, err := Open(filepath.Join(dir, "data.yaml"), tc.split, Options{Logger: quiet})
		if err != nil {
			t.Fatalf("%s: %v", tc.split, err)
		}
		var got []string
		for _, r := range rows(t, d) {
			got = append(got, r.FileName)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: images %v, want %v", tc.split, got, tc.want)
		}
	}
	_, err = Open(filepath.Join(dir, "data.yaml"), "empty", Options{Logger: quiet})
	if !errors.Is(err, datasets.ErrImagesNotFound) || !strings.Contains(err.Error(), "images/empty") {
		t.Errorf("empty split: %v, want ErrImagesNotFound naming the directory", err)
	}
}
