package augment

import (
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// shapeImage draws a filled polygon (pure red) on a dark blue background.
func shapeImage(w, h int, ring []float32) Tile {
	img := &Image{W: w, H: h, Pix: make([]byte, 3*w*h)}
	var z raster.Rasterizer
	g := raster.Grid{Rows: h, Cols: w, Stride: 1}
	mask := make([]byte, w*h)
	if err := z.Dense(mask, g, [][]float32{ring}); err != nil {
		panic(err)
	}
	for i, m := range mask {
		if m == 1 {
			img.Pix[3*i] = 250
		} else {
			img.Pix[3*i+2] = 90
		}
	}
	return Tile{Img: img, Instances: []shard.Instance{{Class: 3, Polygons: [][]float32{ring}}}}
}

// TestPolygonLandsWhereItsMaskSays checks, for many random plans, that
// mask cells (stride 1 at the centre of each output pixel) away from the
// polygon edge agree with the rendered pixel colour.
func TestPolygonLandsWhereItsMaskSays(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ImgSz = 96
	cfg.HSVH, cfg.HSVS, cfg.HSVV = 0, 0, 0
	cfg.Degrees, cfg.Shear = 20, 5
	tris := [][]float32{
		{10, 10, 70, 20, 30, 50},
		{5, 40, 60, 5, 75, 55, 20, 58},
		{40, 5, 79, 30, 50, 59},
		{2, 2, 30, 2, 30, 30, 2, 30},
	}
	var tiles [4]Tile
	for i := range tiles {
		tiles[i] = shapeImage(80, 60, tris[i])
	}
	var z raster.Rasterizer
	s := cfg.ImgSz
	out := make([]byte, 3*s*s)
	mask := make([]byte, s*s)
	g := raster.Grid{Rows: s, Cols: s, Stride: 1}
	var l Labels
	checked := 0
	for seed := uint64(0); seed < 40; seed++ {
		// Odd seeds add a perspective term: the per-pixel projective path.
		cfg.Perspective = 0.0008 * float64(seed%2)
		for _, mode := range []Mode{Train, TrainNoMosaic, Val} {
			rng := order.NewRand(seed, order.StreamSample, 0, 0)
			ts := tiles[:1]
			if WantMosaic(&cfg, mode, rng) {
				ts = tiles[:]
			}
			p := NewPlan(&cfg, mode, rng, ts)
			if err := Render(out, &p, ts, cfg.Fill); err != nil {
				t.Fatal(err)
			}
			l.Reset()
			BuildLabels(&l, &cfg, &p, ts)
			union := make([]byte, s*s)
			for k := 0; k < l.N(); k++ {
				if err := z.Dense(mask, g, l.Rings(nil, k)); err != nil {
					t.Fatal(err)
				}
				for i, m := range mask {
					union[i] |= m
				}
			}
			// A red pixel whose 3x3 neighbourhood is all red must be
			// inside some kept or dropped instance; a mask cell whose
			// neighbourhood is all ON must be red.
			for y := 1; y < s-1; y++ {
				for x := 1; x < s-1; x++ {
					allOn := true
					for dy := -1; dy <= 1; dy++ {
						for dx := -1; dx <= 1; dx++ {
							allOn = allOn && union[(y+dy)*s+x+dx] == 1
						}
					}
					if allOn {
						checked++
						if r := out[y*s+x]; r < 128 { // mostly red: bilinear taps may straddle an acute vertex
							t.Fatalf("seed %d mode %d: mask ON at (%d,%d) but red=%d", seed, mode, x, y, r)
						}
					}
					if union[y*s+x] == 0 && out[y*s+x] > 200 && l.Dropped == 0 {
						allRed := true
						for dy := -1; dy <= 1; dy++ {
							for dx := -1; dx <= 1; dx++ {
								allRed = allRed && out[(y+dy)*s+x+dx] > 200
							}
						}
						if allRed {
							t.Fatalf("seed %d mode %d: red interior pixel (%d,%d) outside every mask", seed, mode, x, y)
						}
					}
				}
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d interior cells checked", checked)
	}
}

func TestValLetterboxPlacement(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ImgSz = 64
	tile := shapeImage(80, 60, []float32{0, 0, 80, 0, 80, 60, 0, 60})
	p := NewPlan(&cfg, Val, nil, []Tile{tile})
	// 80x60 → 64x48, padding 16 split 8/8.
	want := geom.Affine{0.8, 0, 0, 0, 0.8, 8}
	if p.Place[0] != want {
		t.Fatalf("place %v, want %v", p.Place[0], want)
	}
	out := make([]byte, 3*64*64)
	if err := Render(out, &p, []Tile{tile}, 114); err != nil {
		t.Fatal(err)
	}
	for y := 0; y < 64; y++ {
		wantR := byte(114)
		if y >= 8 && y < 56 {
			wantR = 250
		}
		if out[y*64+10] != wantR {
			t.Fatalf("row %d: red %d, want %d", y, out[y*64+10], wantR)
		}
	}
	var l Labels
	BuildLabels(&l, &cfg, &p, []Tile{tile})
	if l.N() != 1 || l.Boxes[0] != 0 || l.Boxes[1] != 8 || l.Boxes[2] != 64 || l.Boxes[3] != 56 {
		t.Fatalf("boxes %v", l.Boxes)
	}
}

func TestCandidateRule(t *testing.T) {
	cfg := DefaultConfig()
	r := func(x0, y0, x1, y1 float32) geom.Rect { return geom.Rect{X0: x0, Y0: y0, X1: x1, Y1: y1} }
	tests := []struct {
		name          string
		before, after geom.Rect
		keep          bool
	}{
		{"unclipped", r(0, 0, 10, 10), r(0, 0, 10, 10), true},
		{"width exactly 2", r(0, 0, 10, 10), r(0, 0, 2, 10), false},
		{"width 2.01", r(0, 0, 10, 10), r(0, 0, 2.01, 10), true},
		{"height 1", r(0, 0, 10, 10), r(0, 0, 10, 1), false},
		{"area 1% exactly", r(0, 0, 100, 100), r(0, 0, 10, 10), false},
		{"area above 1%", r(0, 0, 100, 100), r(0, 0, 10, 10.1), true},
		{"aspect 100", r(0, 0, 400, 4), r(0, 0, 400, 4), false},
		{"aspect 99", r(0, 0, 396, 4), r(0, 0, 396, 4), true},
	}
	for _, tc := range tests {
		if got := Candidate(&cfg, tc.before, tc.after); got != tc.keep {
			t.Errorf("%s: keep=%v, want %v", tc.name, got, tc.keep)
		}
	}
}

func TestLabelsDropClippedAndTinyInstances(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ImgSz = 64
	tile := shapeImage(64, 64, []float32{0, 0, 1, 0, 1, 1})
	tile.Instances = []shard.Instance{
		{Class: 1, Polygons: [][]float32{{10, 10, 30, 10, 30, 30, 10, 30}}}, // kept
		{Class: 2, Polygons: [][]float32{{10, 10, 11, 10, 11, 40}}},         // 1 px wide
		{Class: 3, Polygons: [][]float32{{100, 100, 120, 100, 120, 120}}},   // outside
		{Class: 4, IsCrowd: true, RLE: &shard.RLE{Height: 64, Width: 64, Counts: []uint32{4096}}},
		{Class: 5}, // no geometry
	}
	p := NewPlan(&cfg, Val, nil, []Tile{tile})
	var l Labels
	BuildLabels(&l, &cfg, &p, []Tile{tile})
	if l.N() != 1 || l.Classes[0] != 1 || l.CrowdSkipped != 1 || l.Dropped != 3 {
		t.Fatalf("classes %v dropped %d crowd %d", l.Classes, l.Dropped, l.CrowdSkipped)
	}
}

func TestHSVGreyAndIdentity(t *testing.T) {
	var h hsv
	h.set(1, 1, 1)
	for _, c := range [][3]uint8{{0, 0, 0}, {255, 255, 255}, {200, 10, 10}, {10, 200, 30}, {30, 40, 250}, {123, 77, 201}} {
		r, g, b := h.apply(c[0], c[1], c[2])
		d := func(a, b uint8) int { return max(int(a)-int(b), int(b)-int(a)) }
		if d(r, c[0]) > 3 || d(g, c[1]) > 3 || d(b, c[2]) > 3 {
			t.Errorf("identity gains changed %v to %v", c, [3]uint8{r, g, b})
		}
	}
	h.set(1, 1, 0.5)
	if r, g, b := h.apply(200, 200, 200); r != 100 || g != 100 || b != 100 {
		t.Errorf("grey 200 at v·0.5 → %d %d %d", r, g, b)
	}
}
