package augment

import (
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/pipeline/order"
)

// TestSpanRenderMatchesPerPixelReference compares the span path (closed-form
// tile intervals, fixed-point stepping) with the per-pixel float path on
// random plans: values may differ by one level from rounding, and only
// pixels on a tile border may be assigned differently.
func TestSpanRenderMatchesPerPixelReference(t *testing.T) {
	tiles := benchTiles()
	for i := range tiles { // steep ramps: a position error of a pixel shows as 4 levels
		img := tiles[i].Img
		for y := 0; y < img.H; y++ {
			for x := 0; x < img.W; x++ {
				o := 3 * (y*img.W + x)
				img.Pix[o], img.Pix[o+1], img.Pix[o+2] = byte(4*x+40*i), byte(4*y), byte(2*(x+y))
			}
		}
	}
	cfg := DefaultConfig()
	cfg.ImgSz = 160
	cfg.Degrees, cfg.Shear = 30, 10
	s := cfg.ImgSz
	fast, ref := make([]byte, 3*s*s), make([]byte, 3*s*s)
	for seed := uint64(0); seed < 60; seed++ {
		for _, mode := range []Mode{Train, TrainNoMosaic, Val} {
			rng := order.NewRand(seed, 9, 0, 0)
			ts := tiles[:1]
			if WantMosaic(&cfg, mode, rng) {
				ts = tiles
			}
			p := NewPlan(&cfg, mode, rng, ts)
			if err := Render(fast, &p, ts, 114); err != nil {
				t.Fatal(err)
			}
			forcePerPixel = true
			err := Render(ref, &p, ts, 114)
			forcePerPixel = false
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i := range fast {
				if d := int(fast[i]) - int(ref[i]); d > 1 || d < -1 {
					bad++
				}
			}
			if bad > len(fast)/200 {
				t.Fatalf("seed %d mode %d: %d of %d values differ by more than 1", seed, mode, bad, len(fast))
			}
		}
	}
}

// TestHSVTableMatchesDirect checks the per-image coefficient table against
// the direct OpenCV-style conversion for random colours and gains.
func TestHSVTableMatchesDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h hsv
	var tab hsvTable
	for g := 0; g < 20; g++ {
		h.set(1+0.03*(r.Float64()-0.5), 1+1.4*(r.Float64()-0.5), 1+0.8*(r.Float64()-0.5))
		tab.build(&h)
		for i := 0; i < 5000; i++ {
			c := [3]uint8{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256))}
			a0, a1, a2 := h.apply(c[0], c[1], c[2])
			b0, b1, b2 := tab.apply(c[0], c[1], c[2])
			d := func(x, y uint8) int { return max(int(x)-int(y), int(y)-int(x)) }
			if d(a0, b0) > 1 || d(a1, b1) > 1 || d(a2, b2) > 1 {
				t.Fatalf("gains %d colour %v: direct %v table %v", g, c, [3]uint8{a0, a1, a2}, [3]uint8{b0, b1, b2})
			}
		}
	}
}

// TestAffinePlansTakeTheSpanPath guards the exact last row of Minv: a
// rounding error there sends an affine plan down the projective per-pixel
// path (correct but several times slower).
func TestAffinePlansTakeTheSpanPath(t *testing.T) {
	tiles := benchTiles()
	cfg := DefaultConfig()
	cfg.Degrees, cfg.Shear = 10, 5
	for i := uint64(0); i < 500; i++ {
		rng := order.NewRand(1, 2, 3, i)
		mode := Train
		ts := tiles[:1]
		if WantMosaic(&cfg, mode, rng) {
			ts = tiles
		}
		p := NewPlan(&cfg, mode, rng, ts)
		if mi := p.Minv; mi[6] != 0 || mi[7] != 0 || mi[8] != 1 {
			t.Fatalf("plan %d: affine M %v has projective inverse %v", i, p.M, mi)
		}
	}
}

// TestRowSpanMatchesGeneralSpan: with a constant source row per output row
// (no rotation or shear) sampleSpanRow must give exactly sampleSpan's bytes.
func TestRowSpanMatchesGeneralSpan(t *testing.T) {
	tiles := benchTiles()
	cfg := DefaultConfig()
	cfg.ImgSz = 320
	s := cfg.ImgSz
	a, b := make([]byte, 3*s*s), make([]byte, 3*s*s)
	for seed := uint64(0); seed < 40; seed++ {
		rng := order.NewRand(seed, 4, 0, 0)
		ts := tiles[:1]
		if WantMosaic(&cfg, Train, rng) {
			ts = tiles
		}
		p := NewPlan(&cfg, Train, rng, ts)
		if i := renderBoth(t, &p, ts, a, b, &forceGeneralSpan); i >= 0 {
			t.Fatalf("seed %d: byte %d: row span %d, general span %d", seed, i, a[i], b[i])
		}
	}
}

// TestFill: every length up to a few rows, every byte set, nothing past
// the slice touched.
func TestFill(t *testing.T) {
	buf := make([]byte, 2100)
	for n := 0; n < 2000; n += 1 + n/50 {
		for i := range buf {
			buf[i] = 0
		}
		fill(buf[:n], 7)
		for i, v := range buf {
			if want := byte(7 * b2i(i < n)); v != want {
				t.Fatalf("n %d: byte %d is %d, want %d", n, i, v, want)
			}
		}
	}
}
