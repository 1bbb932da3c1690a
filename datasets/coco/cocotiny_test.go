package coco

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"

	"github.com/segpipe/segpipe/formats/shard"
)

// sharedDir locates ../shared relative to the repository root (the
// directory holding go.mod), skipping the test when it is absent.
func sharedDir(t testing.TB, rel string) string {
	t.Helper()
	return shared.Path(t, rel)
}

// refAnn is the test's own decoding of a COCO annotation with
// encoding/json, independent of the streaming reader.
type refAnn struct {
	ID           int64           `json:"id"`
	ImageID      int64           `json:"image_id"`
	CategoryID   int32           `json:"category_id"`
	IsCrowd      int             `json:"iscrowd"`
	Area         float64         `json:"area"`
	BBox         []float64       `json:"bbox"`
	Segmentation json.RawMessage `json:"segmentation"`
}

type refFile struct {
	Images []struct {
		ID int64 `json:"id"`
	} `json:"images"`
	Annotations []refAnn `json:"annotations"`
	Categories  []struct {
		ID int32 `json:"id"`
	} `json:"categories"`
}

func TestCocoTinyRoundTrip(t *testing.T) {
	root := sharedDir(t, "data/coco-tiny")
	for _, tc := range []struct {
		split       string
		anns, crowd int
	}{
		{"train2017", 705, 6},
		{"val2017", 815, 11},
	} {
		t.Run(tc.split, func(t *testing.T) {
			annPath := filepath.Join(root, "annotations", "instances_"+tc.split+".json")
			d, err := Open(annPath, filepath.Join(root, tc.split), Options{Strict: true})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(annPath)
			if err != nil {
				t.Fatal(err)
			}
			var ref refFile
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			refByID := map[int64]refAnn{}
			for _, a := range ref.Annotations {
				refByID[a.ID] = a
			}
			if d.Len() != 80 || len(ref.Images) != 80 {
				t.Errorf("Len = %d, reference %d images, README says 80", d.Len(), len(ref.Images))
			}
			if got := len(d.Categories()); got != 80 {
				t.Errorf("%d categories, want 80", got)
			}
			var anns, crowd, rings int
			lastID := int64(-1)
			err = d.Images(context.Background(), 0, func(im *shard.Image) error {
				if im.ImageID <= lastID {
					t.Errorf("image %d after %d: not ascending", im.ImageID, lastID)
				}
				lastID = im.ImageID
				if im.Format != "jpeg" || len(im.Bytes) < 1000 {
					t.Errorf("image %d: format %q, %d bytes", im.ImageID, im.Format, len(im.Bytes))
				}
				for _, in := range im.Instances {
					anns++
					r, ok := refByID[in.AnnID]
					if !ok || r.ImageID != im.ImageID || r.CategoryID != in.CategoryID {
						t.Fatalf("annotation %d: not in the reference for image %d", in.AnnID, im.ImageID)
					}
					if d.Categories()[in.Class].ID != in.CategoryID {
						t.Errorf("annotation %d: class %d is not category %d", in.AnnID, in.Class, in.CategoryID)
					}
					if in.Area != float32(r.Area) {
						t.Errorf("annotation %d: area %v, want float32(%v)", in.AnnID, in.Area, r.Area)
					}
					for i := range 4 {
						if in.BBox[i] != float32(r.BBox[i]) {
							t.Errorf("annotation %d: bbox %v, want %v", in.AnnID, in.BBox, r.BBox)
						}
					}
					if r.IsCrowd == 1 {
						crowd++
						var seg struct {
							Size   [2]int32 `json:"size"`
							Counts []uint32 `json:"counts"`
						}
						if err := json.Unmarshal(r.Segmentation, &seg); err != nil {
							t.Fatalf("annotation %d: %v", in.AnnID, err)
						}
						if !in.IsCrowd || in.RLE == nil || in.RLE.Height != seg.Size[0] || in.RLE.Width != seg.Size[1] || len(in.Polygons) != 0 {
							t.Fatalf("annotation %d: crowd RLE not carried over", in.AnnID)
						}
						if len(in.RLE.Counts) != len(seg.Counts) {
							t.Fatalf("annotation %d: %d counts, want %d", in.AnnID, len(in.RLE.Counts), len(seg.Counts))
						}
						for i, c := range seg.Counts {
							if in.RLE.Counts[i] != c {
								t.Fatalf("annotation %d: count %d is %d, want %d", in.AnnID, i, in.RLE.Counts[i], c)
							}
						}
						continue
					}
					var polys [][]float64
					if err := json.Unmarshal(r.Segmentation, &polys); err != nil {
						t.Fatalf("annotation %d: %v", in.AnnID, err)
					}
					if len(polys) != len(in.Polygons) || in.IsCrowd || in.RLE != nil {
						t.Fatalf("annotation %d: %d rings, want %d", in.AnnID, len(in.Polygons), len(polys))
					}
					for k, ring := range polys {
						rings++
						if len(ring) != len(in.Polygons[k]) {
							t.Fatalf("annotation %d ring %d: %d values, want %d", in.AnnID, k, len(in.Polygons[k]), len(ring))
						}
						for i, v := range ring {
							// The shard stores float32: the exact value is the
							// float32 nearest the float64 nearest the JSON text.
							if in.Polygons[k][i] != float32(v) {
								t.Fatalf("annotation %d ring %d value %d: %v, want float32(%v)", in.AnnID, k, i, in.Polygons[k][i], v)
							}
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if anns != tc.anns || crowd != tc.crowd || len(ref.Annotations) != tc.anns {
				t.Errorf("%d annotations (%d crowd), want %d (%d crowd)", anns, crowd, tc.anns, tc.crowd)
			}
			if d.Report().Total() != 0 {
				t.Errorf("skipped %s on clean data", d.Report())
			}
			t.Logf("%s: %d images, %d annotations, %d crowd, %d rings", tc.split, d.Len(), anns, crowd, rings)
		})
	}
}
