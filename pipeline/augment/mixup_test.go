package augment

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/pipeline/order"
)

// Mixup blends a second sample as Ultralytics' MixUp does: the image is
// ⌊a·r + b·(1−r)⌋ per byte, the labels (and so the masks) are the first
// sample's followed by the second's, each placed by its own plan, and the
// flips and channel order of the first apply to both. Only Train mixes.
func TestMixupBlendsImagesAndConcatenatesLabels(t *testing.T) {
	const s = 32
	a := shapeImage(s, s, []float32{2, 2, 12, 2, 12, 10, 2, 10})
	b := shapeImage(s, s, []float32{16, 18, 30, 18, 30, 28, 16, 28})
	b.Instances[0].Class = 5
	// b in green, so that every byte of the blend is seen.
	for i := 0; i < len(b.Img.Pix); i += 3 {
		b.Img.Pix[i], b.Img.Pix[i+1] = b.Img.Pix[i+1], b.Img.Pix[i]
	}
	for _, tc := range []struct {
		name    string
		mixup   float64
		mode    Mode
		flipud  bool
		mixed   bool
		classes []int32
		boxes   []float32
	}{
		{"mixup 1", 1, Train, false, true, []int32{3, 5}, []float32{2, 2, 12, 10, 16, 18, 30, 28}},
		{"mixup 1, flipped pair", 1, Train, true, true, []int32{3, 5}, []float32{2, 22, 12, 30, 16, 4, 30, 14}},
		{"mixup 0", 0, Train, false, false, []int32{3}, []float32{2, 2, 12, 10}},
		{"last epochs (no mosaic, no mixup)", 1, TrainNoMosaic, false, false, []int32{3}, []float32{2, 2, 12, 10}},
		{"validation", 1, Val, false, false, []int32{3}, []float32{2, 2, 12, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := still(s)
			cfg.Mixup = tc.mixup
			if tc.flipud {
				cfg.FlipUD = 1
			}
			rng := order.NewRand(3, order.StreamSample, 0, 0)
			ta, tb := []Tile{a}, []Tile{b}
			p := NewPlan(&cfg, tc.mode, rng, ta)
			next := *rng
			if got := WantMixup(&cfg, tc.mode, rng); got != tc.mixed {
				t.Fatalf("WantMixup %v, want %v", got, tc.mixed)
			}
			if !tc.mixed {
				if *rng != next {
					t.Error("a sample that does not mix took a draw")
				}
				return
			}
			q := NewMixPlan(&cfg, &p, rng, tb)
			r := q.MixWeight()
			if !(r > 0 && r < 1) {
				t.Fatalf("ratio %v", r)
			}
			img, scratch := make([]byte, 3*s*s), make([]byte, 3*s*s)
			if err := RenderMix(img, scratch, &p, ta, []Part{{Plan: &q, Tiles: tb}}, cfg.Fill); err != nil {
				t.Fatal(err)
			}
			ia, ib := make([]byte, 3*s*s), make([]byte, 3*s*s)
			if err := Render(ia, &p, ta, cfg.Fill); err != nil {
				t.Fatal(err)
			}
			if err := Render(ib, &q, tb, cfg.Fill); err != nil {
				t.Fatal(err)
			}
			for i := range img {
				if want := byte(math.Floor(float64(ia[i])*r + float64(ib[i])*(1-r))); img[i] != want {
					t.Fatalf("byte %d: %d, want ⌊%d·%v + %d·(1−r)⌋ = %d", i, img[i], ia[i], r, ib[i], want)
				}
			}
			var l Labels
			BuildLabels(&l, &cfg, &p, ta)
			BuildLabels(&l, &cfg, &q, tb)
			if !slices.Equal(l.Classes, tc.classes) || !slices.Equal(l.Boxes, tc.boxes) {
				t.Errorf("classes %v boxes %v, want %v %v", l.Classes, l.Boxes, tc.classes, tc.boxes)
			}
		})
	}
}

// The HSV jitter of the first sample applies to the blend (Ultralytics
// jitters after MixUp), not to each image before it.
func TestMixupJittersTheBlend(t *testing.T) {
	const s = 16
	a := shapeImage(s, s, []float32{2, 2, 12, 2, 12, 10, 2, 10})
	b := shapeImage(s, s, []float32{4, 4, 14, 4, 14, 14, 4, 14})
	cfg := still(s)
	cfg.Mixup, cfg.HSVH, cfg.HSVS, cfg.HSVV = 1, 0.5, 0.7, 0.4
	rng := order.NewRand(9, order.StreamSample, 0, 0)
	p := NewPlan(&cfg, Train, rng, []Tile{a})
	if !WantMixup(&cfg, Train, rng) {
		t.Fatal("no mixup at probability 1")
	}
	q := NewMixPlan(&cfg, &p, rng, []Tile{b})
	got, scratch := make([]byte, 3*s*s), make([]byte, 3*s*s)
	if err := RenderMix(got, scratch, &p, []Tile{a}, []Part{{Plan: &q, Tiles: []Tile{b}}}, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	plain := p
	plain.hsv.on = false
	want, ib := make([]byte, 3*s*s), make([]byte, 3*s*s)
	_ = Render(want, &plain, []Tile{a}, cfg.Fill)
	_ = Render(ib, &q, []Tile{b}, cfg.Fill)
	blend(want, ib, q.mixW)
	var tab hsvTable
	tab.build(&p.hsv)
	tab.applyRow(want[:s*s], want[s*s:2*s*s], want[2*s*s:])
	if !bytes.Equal(got, want) {
		t.Error("RenderMix is not HSV(blend(a, b))")
	}
}

// The ratio follows Beta(32, 32) (mean 1/2, sd 1/√260 ≈ 0.062), as
// Ultralytics draws it, and is a function of the stream alone.
func TestMixupRatioIsBeta32(t *testing.T) {
	const n = 4000
	var sum, sq float64
	for seed := uint64(0); seed < n; seed++ {
		w := betaWeight(order.NewRand(seed, order.StreamSample, 1, 2))
		if w != betaWeight(order.NewRand(seed, order.StreamSample, 1, 2)) {
			t.Fatal("ratio differs between two draws of one stream")
		}
		r := float64(w) / 65536
		sum += r
		sq += r * r
	}
	mean := sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	if math.Abs(mean-0.5) > 0.005 || math.Abs(sd-1/math.Sqrt(260)) > 0.004 {
		t.Errorf("mean %.4f sd %.4f, want 0.5 and %.4f", mean, sd, 1/math.Sqrt(260))
	}
}
