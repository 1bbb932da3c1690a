package coco

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
)

var fixtures = filepath.Join("..", "..", "testdata", "coco")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// collect reads every emitted image into annotation ids by image id.
func collect(t *testing.T, d *Dataset) map[int64][]int64 {
	t.Helper()
	got := map[int64][]int64{}
	err := d.Images(context.Background(), 0, func(im *shard.Image) error {
		ids := []int64{}
		for _, in := range im.Instances {
			ids = append(ids, in.AnnID)
		}
		got[im.ImageID] = ids
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestBadInputFixtures(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fatal: Open fails even without Strict (the document is unusable).
		fatal bool
		// counts expected in the default (skip) mode.
		counts map[string]int64
		// images → annotation ids emitted in the default mode.
		emitted map[int64][]int64
		// substrings of the strict-mode error.
		msg []string
	}{
		{name: "malformed-json", fatal: true, msg: []string{"byte 343", "malformed_json", "expecting ',' or '}'"}},
		{name: "truncated-json", fatal: true, msg: []string{"byte 298", "malformed_json", "unexpected end of input (truncated file?) inside the string starting at byte 296"}},
		{name: "missing-image-file", counts: map[string]int64{"missing_image_file": 1},
			emitted: map[int64][]int64{1: {10}}, msg: []string{"missing.jpg", "image 2", "missing_image_file", "1 annotations refer to it"}},
		{name: "corrupt-image", counts: map[string]int64{"corrupt_image": 1},
			emitted: map[int64][]int64{1: {10}}, msg: []string{"corrupt.jpg", "image 2", "corrupt_image"}},
		{name: "unsupported-image", counts: map[string]int64{"corrupt_image": 1},
			emitted: map[int64][]int64{1: {10}}, msg: []string{"notimage.jpg", "image 2", "corrupt_image", "unknown format"}},
		{name: "image-size-mismatch", counts: map[string]int64{"image_size_mismatch": 1},
			emitted: map[int64][]int64{1: {10}}, msg: []string{"b.jpg", "image 2", "file is 16x12, annotations say 640x12"}},
		{name: "unknown-image-id", counts: map[string]int64{"unknown_image_id": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations.json byte 258 annotations[1] image 7 annotation 11: unknown_image_id"}},
		{name: "unknown-category-id", counts: map[string]int64{"unknown_category_id": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1] image 2 annotation 11: unknown_category_id: category_id 2"}},
		{name: "duplicate-image-id", counts: map[string]int64{"duplicate_image_id": 1},
			emitted: map[int64][]int64{1: {10}, 2: {11}}, msg: []string{"images[2] image 2: duplicate_image_id", "images[1]"}},
		{name: "duplicate-ann-id", counts: map[string]int64{"duplicate_ann_id": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1] image 2 annotation 10: duplicate_ann_id", "annotations[0]"}},
		{name: "duplicate-category-id", counts: map[string]int64{"duplicate_category_id": 1},
			emitted: map[int64][]int64{1: {10}, 2: {11}}, msg: []string{"categories[2]: duplicate_category_id"}},
		{name: "polygon-odd-length", counts: map[string]int64{"polygon_odd_length": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].segmentation[0] image 2 annotation 11: polygon_odd_length: 7 values"}},
		{name: "polygon-too-few-points", counts: map[string]int64{"polygon_too_few_points": 1},
			emitted: map[int64][]int64{1: {10}, 2: {11}}, msg: []string{"annotations[1].segmentation[1] image 2 annotation 11: polygon_too_few_points"}},
		// One dropped annotation is one count (issue 16 counted it twice,
		// once for its ring and once for the annotation).
		{name: "polygon-four-numbers", counts: map[string]int64{"no_valid_polygon": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].segmentation image 2 annotation 11: no_valid_polygon", "annotations[1].segmentation[0]: polygon_four_numbers"}},
		{name: "nan-inf", counts: map[string]int64{"non_finite_number": 2},
			emitted: map[int64][]int64{1: {}, 2: {}}, msg: []string{"annotations[0].segmentation[0] image 1 annotation 10: non_finite_number: value 2 is NaN"}},
		{name: "invalid-rle", counts: map[string]int64{"invalid_rle": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].segmentation image 2 annotation 11: invalid_rle: counts sum to 18"}},
		// Issue 30: an RLE whose size is not its image's passed unnoticed.
		{name: "rle-size-mismatch", counts: map[string]int64{"invalid_rle": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1] image 2 annotation 11: invalid_rle: segmentation size [10, 10], the image is 16x12 (size [12, 16])"}},
		{name: "invalid-rle-string", counts: map[string]int64{"invalid_rle": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].segmentation.counts image 2 annotation 11: invalid_rle", "'~'"}},
		{name: "empty-segmentation", counts: map[string]int64{"empty_segmentation": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotation 11: empty_segmentation"}},
		{name: "invalid-field", counts: map[string]int64{"invalid_field": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].id image 2: invalid_field: is a string, want an integer"}},
		{name: "missing-field", counts: map[string]int64{"missing_field": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1] image 2 annotation 11: missing_field: no category_id"}},
		{name: "invalid-file-name", counts: map[string]int64{"invalid_file_name": 1, "unknown_image_id": 1},
			emitted: map[int64][]int64{1: {10}}, msg: []string{"images[1].file_name image 2: invalid_file_name", "../images/b.jpg"}},
		{name: "invalid-bbox", counts: map[string]int64{"invalid_bbox": 1},
			emitted: map[int64][]int64{1: {10}, 2: {}}, msg: []string{"annotations[1].bbox image 2 annotation 11: invalid_bbox: negative size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := filepath.Join(fixtures, "bad-"+tc.name, "annotations.json")
			imgs := filepath.Join(fixtures, "images")

			_, err := Open(ann, imgs, Options{Strict: true, Logger: quiet})
			if err == nil {
				t.Fatal("strict Open succeeded")
			}
			if !errors.Is(err, datasets.ErrBadInput) {
				t.Errorf("strict error %v does not wrap ErrBadInput", err)
			}
			// The run fails: a strict message must not say it skipped.
			if strings.Contains(err.Error(), "skipped") || strings.Contains(err.Error(), "dropped") {
				t.Errorf("strict error %q speaks of skipping while the run fails", err)
			}
			for _, m := range append(tc.msg, ann) {
				if !strings.Contains(err.Error(), m) && !strings.Contains(err.Error(), filepath.Base(m)) {
					t.Errorf("strict error %q lacks %q", err, m)
				}
			}

			d, err := Open(ann, imgs, Options{Logger: quiet})
			if tc.fatal {
				if err == nil || !strings.Contains(err.Error(), tc.msg[0]) {
					t.Fatalf("default-mode Open: %v, want the syntax error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("default-mode Open: %v", err)
			}
			if got := d.Report().Counts(); !maps.Equal(got, tc.counts) {
				t.Errorf("counts %v, want %v", got, tc.counts)
			}
			got := collect(t, d)
			if len(got) != d.Len() || len(got) != len(tc.emitted) {
				t.Errorf("emitted %d images (Len %d), want %d", len(got), d.Len(), len(tc.emitted))
			}
			for id, want := range tc.emitted {
				if g, ok := got[id]; !ok || !equalIDs(g, want) {
					t.Errorf("image %d: annotations %v, want %v", id, g, want)
				}
			}
		})
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEdgeCasesAccepted(t *testing.T) {
	d, err := Open(filepath.Join(fixtures, "good-edge", "annotations.json"), filepath.Join(fixtures, "images"), Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	cats := d.Categories()
	if len(cats) != 2 || cats[0].ID != 1 || cats[0].Index != 0 || cats[1].ID != 3 || cats[1].Index != 1 || cats[1].Name != "dog!" || cats[0].Supercategory != "animal" {
		t.Fatalf("categories %+v", cats)
	}
	var rows []shard.Image
	err = d.Images(context.Background(), 0, func(im *shard.Image) error {
		c := *im
		c.Instances = nil
		for _, in := range im.Instances {
			in.Polygons = clonePolys(in.Polygons)
			if in.RLE != nil {
				r := *in.RLE
				r.Counts = append([]uint32(nil), r.Counts...)
				in.RLE = &r
			}
			c.Instances = append(c.Instances, in)
		}
		rows = append(rows, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].ImageID != 1 || rows[1].ImageID != 2 {
		t.Fatalf("rows %d, want images 1 then 2", len(rows))
	}
	if rows[0].Format != "png" || len(rows[0].Instances) != 0 || rows[0].Width != 16 || rows[0].Height != 12 {
		t.Errorf("empty image: %+v", rows[0])
	}
	ins := rows[1].Instances
	if rows[1].Format != "jpeg" || len(ins) != 4 {
		t.Fatalf("image 2: format %q, %d instances", rows[1].Format, len(ins))
	}
	for i, id := range []int64{30, 31, 32, 33} {
		if ins[i].AnnID != id {
			t.Errorf("instance %d is annotation %d, want %d (ascending ids)", i, ins[i].AnnID, id)
		}
	}
	// Points outside the image are kept exactly as given.
	if p := ins[1].Polygons; len(p) != 1 || p[0][0] != -2.5 || p[0][2] != 20.25 || p[0][5] != 15.75 || ins[1].Class != 1 || ins[1].CategoryID != 3 {
		t.Errorf("outside points: %+v", ins[1])
	}
	// List-form and string-form crowd RLE.
	for _, c := range []struct {
		i      int
		counts []uint32
	}{{0, []uint32{0, 3, 9, 3, 177}}, {2, []uint32{13, 3, 9, 3, 164}}} {
		in := ins[c.i]
		if !in.IsCrowd || in.RLE == nil || in.RLE.Height != 12 || in.RLE.Width != 16 || !slicesEqual(in.RLE.Counts, c.counts) || in.Polygons != nil {
			t.Errorf("crowd %d: %+v rle %+v", in.AnnID, in, in.RLE)
		}
	}
	if p := ins[3].Polygons; len(p) != 2 || p[1][0] != float32(1.000001) || p[1][1] != 2.5 || p[1][4] != float32(0.3333333333333333) {
		t.Errorf("two-part instance: %v", p)
	}
	if ins[3].IsCrowd || ins[3].BBox != [4]float32{0.1, 0.2, 5, 6} || ins[3].Area != 20 {
		t.Errorf("instance 33: %+v", ins[3])
	}
}

func clonePolys(p [][]float32) [][]float32 {
	if p == nil {
		return nil
	}
	out := make([][]float32, len(p))
	for i, r := range p {
		out[i] = append([]float32(nil), r...)
	}
	return out
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Issue 16: an id of 2^70 was reported as "not an integer".
func TestHugeIDIsOutOfRangeNotANonInteger(t *testing.T) {
	dir := t.TempDir()
	ann := filepath.Join(dir, "a.json")
	doc := `{"images":[],"categories":[{"id":1,"name":"x"}],"annotations":[{"id":1180591620717411303424,"image_id":1,"category_id":1,"bbox":[0,0,1,1],"area":1,"segmentation":[[0,0,1,0,1,1]]}]}`
	if err := os.WriteFile(ann, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ann, dir, Options{Strict: true, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "1180591620717411303424 does not fit a 64-bit integer") {
		t.Fatalf("err = %v, want the id named as out of the 64-bit range", err)
	}
}
