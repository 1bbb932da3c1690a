package augment

import (
	"slices"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Ultralytics' rect training draws RandomPerspective onto the batch's
// h×w shape: with every random term off the letterboxed image lands
// exactly on that rectangle at the top left of the square (translation
// half of w and h, not of the square's side), a left-right flip mirrors
// within w and an up-down one within h, labels are clipped to the
// rectangle, and every pixel outside it is fill.
func TestRectPlanOutputsTheBatchShape(t *testing.T) {
	const s = 64
	for _, tc := range []struct {
		name           string
		w0, h0         int // the image: fills the rectangle at scale 1
		h, w           int
		flipLR, flipUD bool
	}{
		{"wide", 64, 32, 32, 64, false, false},
		{"tall", 32, 64, 64, 32, false, false},
		{"tall, flipped left-right", 32, 64, 64, 32, true, false},
		{"wide, flipped up-down", 64, 32, 32, 64, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := still(s)
			if tc.flipLR {
				cfg.FlipLR = 1
			}
			if tc.flipUD {
				cfg.FlipUD = 1
			}
			img := &Image{W: tc.w0, H: tc.h0, Pix: make([]byte, 3*tc.w0*tc.h0)}
			for y := range tc.h0 {
				for x := range tc.w0 {
					i := 3 * (y*tc.w0 + x)
					img.Pix[i], img.Pix[i+1], img.Pix[i+2] = byte(3*x+1), byte(3*y+1), byte(x^y)
				}
			}
			tile := Tile{Img: img, Instances: []shard.Instance{
				{Class: 1, Polygons: [][]float32{rect(4, 4, 12, 12)}},
			}}
			rng := order.NewRand(1, order.StreamSample, 0, 0)
			p := NewRectPlan(&cfg, Train, rng, []Tile{tile}, tc.h, tc.w)
			if p.Out != s || p.W != tc.w || p.H != tc.h {
				t.Fatalf("plan out %d live %dx%d, want %d and %dx%d", p.Out, p.H, p.W, s, tc.h, tc.w)
			}
			dst := make([]byte, 3*s*s)
			if err := Render(dst, &p, []Tile{tile}, cfg.Fill); err != nil {
				t.Fatal(err)
			}
			for c := range 3 {
				for y := range s {
					for x := range s {
						want := cfg.Fill
						if x < tc.w && y < tc.h {
							sx, sy := x, y
							if tc.flipLR {
								sx = tc.w - 1 - x
							}
							if tc.flipUD {
								sy = tc.h - 1 - y
							}
							want = img.Pix[3*(sy*tc.w0+sx)+c]
						}
						if got := dst[c*s*s+y*s+x]; got != want {
							t.Fatalf("pixel (%d,%d) channel %d = %d, want %d", x, y, c, got, want)
						}
					}
				}
			}
			var l Labels
			BuildLabels(&l, &cfg, &p, []Tile{tile})
			want := []float32{4, 4, 12, 12}
			if tc.flipLR {
				want = []float32{float32(tc.w) - 12, 4, float32(tc.w) - 4, 12}
			}
			if tc.flipUD {
				want = []float32{4, float32(tc.h) - 12, 12, float32(tc.h) - 4}
			}
			if !slices.Equal(l.Boxes, want) {
				t.Errorf("boxes %v, want %v", l.Boxes, want)
			}
		})
	}
}

// Labels are clipped to the live rectangle, not to the square: an
// instance reaching below a wide batch's height keeps only its part
// inside, and one wholly below it is dropped.
func TestRectPlanClipsLabelsToTheRectangle(t *testing.T) {
	const s = 64
	cfg := still(s)
	cfg.MinSide, cfg.MinArea = -1, -1
	img := &Image{W: 64, H: 64, Pix: make([]byte, 3*64*64)}
	tile := Tile{Img: img, Instances: []shard.Instance{
		{Class: 0, Polygons: [][]float32{rect(8, 44, 24, 60)}}, // 36..52 after the shift: crosses 48
		{Class: 1, Polygons: [][]float32{rect(8, 58, 24, 64)}}, // 50..56: below the rectangle
	}}
	// A square image into a 48×64 rectangle: scale 1, shifted up by
	// (64−48)/2 = 8 (the image is taller than the rectangle: its top and
	// bottom 8 rows fall outside).
	p := NewRectPlan(&cfg, Train, order.NewRand(1, order.StreamSample, 0, 0), []Tile{tile}, 48, 64)
	var l Labels
	BuildLabels(&l, &cfg, &p, []Tile{tile})
	if got, want := l.Boxes, []float32{8, 36, 24, 48}; !slices.Equal(got, want) {
		t.Errorf("boxes %v, want %v (the first cut at 48, the second dropped)", got, want)
	}
}
