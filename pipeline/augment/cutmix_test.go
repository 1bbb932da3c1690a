package augment

import (
	"slices"
	"testing"

	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// CutMix pastes a region of a second sample as Ultralytics' CutMix does:
// the region overlaps no box of the sample; inside it the pixels are the
// partner's, outside the sample's; the partner's instances with at least
// 1 % of their box inside join the labels, cut to the region (box and
// mask); with no clear region, or no partner instance inside, the sample
// is left alone. Only Train cuts.
func TestCutmixPastesARegionAndItsInstances(t *testing.T) {
	const s = 32
	small := shapeImage(s, s, []float32{0, 0, 4, 0, 4, 4, 0, 4})       // a corner box leaves room
	whole := shapeImage(s, s, []float32{0, 0, 32, 0, 32, 32, 0, 32})   // every region overlaps it
	partner := shapeImage(s, s, []float32{0, 0, 32, 0, 32, 32, 0, 32}) // every region holds it
	partner.Instances[0].Class = 5
	for i := 0; i < len(partner.Img.Pix); i += 3 { // green, to tell it apart
		partner.Img.Pix[i], partner.Img.Pix[i+1] = 0, 250
	}
	empty := Tile{Img: partner.Img}
	for _, tc := range []struct {
		name   string
		mode   Mode
		sample Tile
		part   Tile
		want   string // "cut" (some seeds), "never" (no seed cuts), "no draw"
	}{
		{"room beside the sample's box", Train, small, partner, "cut"},
		{"every region overlaps a box", Train, whole, partner, "never"},
		{"no partner instance in the region", Train, small, empty, "never"},
		{"last epochs", TrainNoMosaic, small, partner, "no draw"},
		{"validation", Val, small, partner, "no draw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := still(s)
			cfg.Cutmix = 1
			ta, tb := []Tile{tc.sample}, []Tile{tc.part}
			cuts := 0
			for seed := uint64(0); seed < 30; seed++ {
				rng := order.NewRand(seed, order.StreamSample, 0, 0)
				p := NewPlan(&cfg, tc.mode, rng, ta)
				var l, part Labels
				BuildLabels(&l, &cfg, &p, ta)
				next := *rng
				if !WantCutmix(&cfg, tc.mode, rng) {
					if tc.want != "no draw" || *rng != next {
						t.Fatalf("seed %d: no cutmix at probability 1, or a draw taken", seed)
					}
					continue
				}
				q, ok := NewCutPlan(&cfg, &p, rng, tb, &l, &part, nil)
				if !ok {
					continue
				}
				if tc.want != "cut" {
					t.Fatalf("seed %d: cut, want none", seed)
				}
				cuts++
				r, _ := q.CutRegion()
				if ioa(r, box(l.Boxes, 0)) > 0 || r.X0 < 0 || r.Y0 < 0 || r.X1 > s || r.Y1 > s {
					t.Fatalf("seed %d: region %v overlaps box %v or leaves the canvas", seed, r, box(l.Boxes, 0))
				}
				n0 := l.N()
				AppendCut(&l, &q, &part)
				if !slices.Equal(l.Classes, []int32{3, 5}) || box(l.Boxes, n0) != r {
					t.Fatalf("seed %d: classes %v, pasted box %v, want [3 5] and the region %v", seed, l.Classes, box(l.Boxes, 1), r)
				}
				mask := make([]byte, s*s)
				var z raster.Rasterizer
				if err := z.Dense(mask, raster.Grid{Rows: s, Cols: s, Stride: 1}, l.Rings(nil, n0)); err != nil {
					t.Fatal(err)
				}
				img, scratch := make([]byte, 3*s*s), make([]byte, 3*s*s)
				if err := RenderMix(img, scratch, &p, ta, []Part{{Plan: &q, Tiles: tb}}, cfg.Fill); err != nil {
					t.Fatal(err)
				}
				ia, ib := make([]byte, 3*s*s), make([]byte, 3*s*s)
				_ = Render(ia, &p, ta, cfg.Fill)
				_ = Render(ib, &q, tb, cfg.Fill)
				for y := 0; y < s; y++ {
					for x := 0; x < s; x++ {
						in := float32(x) >= r.X0 && float32(x) < r.X1 && float32(y) >= r.Y0 && float32(y) < r.Y1
						if (mask[y*s+x] == 1) != in {
							t.Fatalf("seed %d: mask at (%d,%d) is %d, region %v", seed, x, y, mask[y*s+x], r)
						}
						src := ia
						if in {
							src = ib
						}
						for c := 0; c < 3; c++ {
							if i := c*s*s + y*s + x; img[i] != src[i] {
								t.Fatalf("seed %d: pixel (%d,%d) not from the %v image", seed, x, y, map[bool]string{true: "partner's", false: "sample's"}[in])
							}
						}
					}
				}
			}
			if (cuts > 0) != (tc.want == "cut") {
				t.Errorf("%d cuts in 30 seeds, want %s", cuts, tc.want)
			}
		})
	}
}

// ioa is Ultralytics' bbox_ioa: intersection over the second box's area.
func TestIOA(t *testing.T) {
	for _, tc := range []struct {
		a, b geom.Rect
		want float64
	}{
		{geom.Rect{X0: 0, Y0: 0, X1: 10, Y1: 10}, geom.Rect{X0: 5, Y0: 5, X1: 15, Y1: 15}, 0.25},
		{geom.Rect{X0: 0, Y0: 0, X1: 10, Y1: 10}, geom.Rect{X0: 10, Y0: 0, X1: 20, Y1: 10}, 0},
		{geom.Rect{X0: 0, Y0: 0, X1: 100, Y1: 100}, geom.Rect{X0: 1, Y0: 1, X1: 2, Y1: 2}, 1},
	} {
		if got := ioa(tc.a, tc.b); got < tc.want-1e-6 || got > tc.want+1e-6 {
			t.Errorf("ioa(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
