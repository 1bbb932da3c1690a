package predict

import (
	"math"
	"testing"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/trainer/model"
)

// A prototype grid whose single channel is +1 inside a square and −1
// outside, and a detection with coefficient 1: the grid mask is the square
// cut by the box, and the original-image mask is the same region mapped
// through a letterbox (scale 0.5, shift 8 px down).
func TestMasksFollowPrototypesAndBox(t *testing.T) {
	const hp, wp, stride = 16, 16, 4
	proto := make([]float32, hp*wp)
	for r := range hp {
		for c := range wp {
			proto[r*wp+c] = -1
			if r >= 4 && r < 12 && c >= 4 && c < 12 {
				proto[r*wp+c] = 1
			}
		}
	}
	// Box covers canvas x 24..64, y 8..40 → cells c 6..16, r 2..10.
	det := model.Detection{Box: [4]float32{24, 8, 64, 40}, Score: 0.9, Class: 2, Coeffs: []float32{1}}
	probs := GridMasks(nil, []model.Detection{det}, proto, hp, wp, stride)
	for r := range hp {
		for c := range wp {
			want := r >= 4 && r < 10 && c >= 6 && c < 12
			if got := probs[r*wp+c] > 0.5; got != want {
				t.Fatalf("grid cell (%d,%d): mask %v, want %v", r, c, got, want)
			}
		}
	}
	// Original image 128×96 letterboxed into 64×64: scale 0.5, shift (0, 8).
	inf := ImageInfo{Image: batch.Image{ID: 7, OrigH: 96, OrigW: 128, Transform: [6]float64{0.5, 0, 0, 0, 0.5, 8}}, Hp: hp, Wp: wp, Stride: stride}
	res, masks, err := nativeResults([]model.Detection{det}, proto, inf, Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.ImageID != 7 || r.CategoryID != 3 || r.Bbox != [4]float64{48, 0, 80, 64} {
		t.Fatalf("result %+v", r)
	}
	// Square cells 4..12 = canvas 16..48 px = original x 32..96, y 16..80;
	// box = original x 48..128, y 0..64. The bilinear edge sits within one
	// original pixel of the cell boundary.
	bad := 0
	for y := range 96 {
		for x := range 128 {
			inSquare := x >= 32 && x < 96 && y >= 16 && y < 80
			inBox := x >= 48 && x < 128 && y < 64
			want := inSquare && inBox
			if (masks[0][y*128+x] != 0) != want {
				edge := math.Abs(float64(x)+0.5-32) < 2 || math.Abs(float64(x)+0.5-96) < 2 || math.Abs(float64(y)+0.5-16) < 2 || math.Abs(float64(y)+0.5-80) < 2
				if !edge {
					t.Fatalf("pixel (%d,%d): mask %d, want %v", x, y, masks[0][y*128+x], want)
				}
				bad++
			}
		}
	}
	if bad > 2*(48+48) {
		t.Errorf("%d edge pixels differ", bad)
	}
	dec, err := rle.FromString(r.Segmentation.Counts, 96, 128)
	if err != nil {
		t.Fatal(err)
	}
	if a := dec.Area(); math.Abs(float64(a)-48*48) > 2*(48+48) {
		t.Errorf("RLE area %d, want about %d", a, 48*48)
	}
}

func TestFilterKeepsScoresAboveConf(t *testing.T) {
	d := []model.Detection{{Score: 0.9}, {Score: 0.5}, {Score: 0.25}, {Score: 0.1}}
	for _, c := range []struct {
		conf float32
		n    int
	}{{0.95, 0}, {0.5, 1}, {0.25, 2}, {0.01, 4}} {
		if got := len(Filter(d, c.conf)); got != c.n {
			t.Errorf("conf %v: %d kept, want %d", c.conf, got, c.n)
		}
	}
}

func TestCropCellsRounding(t *testing.T) {
	box := [4]float32{5, 5, 14, 30} // /4 → 1.25, 1.25, 3.5, 7.5
	r0, r1, c0, c1 := CropCells(box, 4, 8, 8, true)
	if r0 != 1 || r1 != 8 || c0 != 1 || c1 != 4 { // 7.5 rounds to even 8, clamped to 8; 3.5 → 4
		t.Errorf("rounded crop %d %d %d %d", r0, r1, c0, c1)
	}
	r0, r1, c0, c1 = CropCells(box, 4, 8, 8, false)
	if r0 != 2 || r1 != 8 || c0 != 2 || c1 != 4 {
		t.Errorf("fractional crop %d %d %d %d", r0, r1, c0, c1)
	}
}

func TestInvertedBoxGivesEmptyMask(t *testing.T) {
	proto := make([]float32, 8*8)
	for i := range proto {
		proto[i] = 1
	}
	det := model.Detection{Box: [4]float32{20, 20, 8, 8}, Coeffs: []float32{1}} // x2 < x1, y2 < y1
	for _, round := range []bool{true, false} {
		r0, r1, c0, c1 := CropCells(det.Box, 4, 8, 8, round)
		if r1 != r0 || c1 != c0 {
			t.Errorf("round %v: crop %d %d %d %d, want empty", round, r0, r1, c0, c1)
		}
	}
	for _, p := range GridMasks(nil, []model.Detection{det}, proto, 8, 8, 4) {
		if p != 0 {
			t.Fatal("inverted box produced mask pixels")
		}
	}
	inf := ImageInfo{Image: batch.Image{OrigH: 32, OrigW: 32, Transform: [6]float64{1, 0, 0, 0, 1, 0}}, Hp: 8, Wp: 8, Stride: 4}
	if _, _, err := nativeResults([]model.Detection{det}, proto, inf, Options{}.withDefaults()); err != nil {
		t.Fatal(err)
	}
}
