package coco

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// hostileSet writes a COCO set of one image per case, each case's image
// holding n annotations, and returns its annotation file and image dir.
func hostileSet(t *testing.T, files map[string][]byte, sizes map[string][2]int, anns map[string]int) (string, string) {
	t.Helper()
	dir := t.TempDir()
	imgDir := filepath.Join(dir, "images")
	if err := os.Mkdir(imgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	type img struct {
		ID       int64  `json:"id"`
		FileName string `json:"file_name"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
	}
	type ann struct {
		ID           int64       `json:"id"`
		ImageID      int64       `json:"image_id"`
		CategoryID   int         `json:"category_id"`
		Segmentation [][]float64 `json:"segmentation"`
		Area         float64     `json:"area"`
		BBox         []float64   `json:"bbox"`
		IsCrowd      int         `json:"iscrowd"`
	}
	doc := struct {
		Images      []img            `json:"images"`
		Annotations []ann            `json:"annotations"`
		Categories  []map[string]any `json:"categories"`
	}{Annotations: []ann{}, Categories: []map[string]any{{"id": 1, "name": "x"}}}
	names := slices.Sorted(maps.Keys(files))
	for i, name := range names {
		if err := os.WriteFile(filepath.Join(imgDir, name), files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		id := int64(i + 1)
		doc.Images = append(doc.Images, img{id, name, sizes[name][0], sizes[name][1]})
		for k := 0; k < anns[name]; k++ {
			doc.Annotations = append(doc.Annotations, ann{ID: id*100000 + int64(k), ImageID: id, CategoryID: 1,
				Segmentation: [][]float64{{1, 1, 5, 1, 5, 5}}, Area: 8, BBox: []float64{1, 1, 4, 4}})
		}
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	annPath := filepath.Join(dir, "annotations.json")
	if err := os.WriteFile(annPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return annPath, imgDir
}

// Issue 35: hostile images and annotation counts are skipped and counted
// when the set is opened, so that nothing the loader cannot decode, or
// cannot hold the masks of, reaches a shard; --strict fails on each.
func TestHostileImagesAreSkippedAndCounted(t *testing.T) {
	jpg := testimg.JPEG(64, 48)
	for _, tc := range []struct {
		name   string
		data   []byte
		size   [2]int
		anns   int
		reason string // "" kept
		msg    string
	}{
		{"b-valid.jpg", jpg, [2]int{64, 48}, 3, "", ""},
		{"c-huge.png", testimg.HugePNG(), [2]int{65535, 65535}, 1, datasets.ReasonImageTooLarge, "65535x65535"},
		{"d-claims-16000.jpg", testimg.JPEGClaiming(16000, 16000), [2]int{16000, 16000}, 1, datasets.ReasonImageTooLarge, "16000x16000"},
		{"e-half.jpg", testimg.Half(jpg), [2]int{64, 48}, 1, datasets.ReasonCorruptImage, "truncated"},
		{"f-half.png", testimg.Half(testimg.PNG(64, 48)), [2]int{64, 48}, 1, datasets.ReasonCorruptImage, "truncated"},
		{"g-at-limit.jpg", jpg, [2]int{64, 48}, shard.MaxInstances, "", ""},
		{"h-over-limit.jpg", jpg, [2]int{64, 48}, shard.MaxInstances + 1, datasets.ReasonTooManyInstances, "2049 instances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The case's image beside a valid one, so a skip shows as one
			// image emitted instead of two.
			files := map[string][]byte{"a.jpg": jpg, tc.name: tc.data}
			sizes := map[string][2]int{"a.jpg": {64, 48}, tc.name: tc.size}
			ann, imgs := hostileSet(t, files, sizes, map[string]int{"a.jpg": 1, tc.name: tc.anns})
			d, err := Open(ann, imgs, Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, d)
			if tc.reason == "" {
				if len(got) != 2 || len(got[2]) != tc.anns || d.Report().Total() != 0 {
					t.Fatalf("emitted %d images (%d instances in the case's), skipped %v", len(got), len(got[2]), d.Report().Counts())
				}
				return
			}
			if want := map[string]int64{tc.reason: 1}; !maps.Equal(d.Report().Counts(), want) || len(got) != 1 {
				t.Fatalf("counts %v, %d images; want %v and the valid image alone", d.Report().Counts(), len(got), want)
			}
			_, err = Open(ann, imgs, Options{Strict: true, Logger: quiet})
			if !errors.Is(err, datasets.ErrBadInput) || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("strict: %v, want %s mentioning %q", err, tc.reason, tc.msg)
			}
		})
	}
}

// A lowered --max-image-pixels skips what the default keeps.
func TestMaxPixelsOption(t *testing.T) {
	jpg := testimg.JPEG(64, 48)
	ann, imgs := hostileSet(t, map[string][]byte{"a.jpg": jpg}, map[string][2]int{"a.jpg": {64, 48}}, nil)
	d, err := Open(ann, imgs, Options{Logger: quiet, MaxPixels: 64*48 - 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 0 || d.Report().Counts()[datasets.ReasonImageTooLarge] != 1 {
		t.Fatalf("Len %d, counts %v", d.Len(), d.Report().Counts())
	}
}
