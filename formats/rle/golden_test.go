package rle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

type cocoAnn struct {
	ID           int64           `json:"id"`
	ImageID      int64           `json:"image_id"`
	Segmentation json.RawMessage `json:"segmentation"`
	IsCrowd      int             `json:"iscrowd"`
}

type cocoImage struct {
	ID     int64 `json:"id"`
	Height int   `json:"height"`
	Width  int   `json:"width"`
}

type goldenMask struct {
	ID          int64  `json:"id"`
	ImageID     int64  `json:"image_id"`
	H           int    `json:"h"`
	W           int    `json:"w"`
	Counts      string `json:"counts"`
	Area        int    `json:"area"`
	NumPolygons int    `json:"num_polygons"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGoldenMasks checks every coco-tiny polygon and crowd annotation
// against the RLE pycocotools produced for it: byte-identical counts and
// equal area, plus a decode/encode round trip of the golden string.
func TestGoldenMasks(t *testing.T) {
	shared := sharedDir(t)
	for _, split := range []string{"val2017", "train2017"} {
		t.Run(split, func(t *testing.T) {
			var ds struct {
				Images      []cocoImage `json:"images"`
				Annotations []cocoAnn   `json:"annotations"`
			}
			readJSON(t, filepath.Join(shared, "data", "coco-tiny", "annotations", "instances_"+split+".json"), &ds)
			imgs := map[int64]cocoImage{}
			for _, im := range ds.Images {
				imgs[im.ID] = im
			}
			anns := map[int64]cocoAnn{}
			for _, a := range ds.Annotations {
				anns[a.ID] = a
			}
			for _, kind := range []string{"polygon", "crowd"} {
				var want []goldenMask
				readJSON(t, filepath.Join(shared, "goldens", "masks", kind+"_rle_"+split+".json"), &want)
				if len(want) == 0 {
					t.Fatalf("%s %s: no golden masks", kind, split)
				}
				for _, g := range want {
					a, ok := anns[g.ID]
					if !ok {
						t.Fatalf("annotation %d missing", g.ID)
					}
					im := imgs[a.ImageID]
					got, err := annToRLE(a.Segmentation, im.Height, im.Width)
					if err != nil {
						t.Fatalf("annotation %d: %v", g.ID, err)
					}
					if got.H != g.H || got.W != g.W {
						t.Errorf("annotation %d: size %dx%d, want %dx%d", g.ID, got.H, got.W, g.H, g.W)
					}
					if s := got.String(); s != g.Counts {
						t.Errorf("annotation %d (%s): counts differ\n got %.80s\nwant %.80s", g.ID, kind, s, g.Counts)
					}
					if got.Area() != g.Area {
						t.Errorf("annotation %d: area %d, want %d", g.ID, got.Area(), g.Area)
					}
					dec, err := FromString(g.Counts, g.H, g.W)
					if err != nil {
						t.Errorf("annotation %d: golden string: %v", g.ID, err)
					} else if Encode(dec.Counts) != g.Counts {
						t.Errorf("annotation %d: golden string does not round-trip", g.ID)
					}
				}
				t.Logf("%s %s: %d masks", kind, split, len(want))
			}
		})
	}
}

// annToRLE follows COCO.annToRLE for the two ground-truth forms.
func annToRLE(seg json.RawMessage, h, w int) (RLE, error) {
	var polys [][]float64
	if err := json.Unmarshal(seg, &polys); err == nil {
		return FromPolygons(polys, h, w)
	}
	var u struct {
		Size   []int    `json:"size"`
		Counts []uint32 `json:"counts"`
	}
	if err := json.Unmarshal(seg, &u); err != nil {
		return RLE{}, err
	}
	if len(u.Size) != 2 {
		return RLE{}, fmt.Errorf("size %v", u.Size)
	}
	r := RLE{H: u.Size[0], W: u.Size[1], Counts: u.Counts}
	return r, r.Validate()
}
