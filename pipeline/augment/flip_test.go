package augment

import (
	"bytes"
	"testing"

	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// still is a configuration whose random perspective is the identity on an
// s×s letterbox (no translation, scale gain 0), with HSV off, so that a
// test sees only the settings it turns on.
func still(s int) Config {
	c := DefaultConfig()
	c.ImgSz = s
	c.Mosaic, c.Translate, c.Scale, c.FlipLR = 0, 0, 0, 0
	c.HSVH, c.HSVS, c.HSVV = 0, 0, 0
	return c
}

// rendered is one sample: its image (CHW), its labels and instance 0's
// mask at stride 1.
type rendered struct {
	img, mask []byte
	box       [4]float32
	n         int
}

func renderOne(t *testing.T, cfg *Config, mode Mode, seed uint64, tile Tile) rendered {
	t.Helper()
	s := cfg.ImgSz
	rng := order.NewRand(seed, order.StreamSample, 0, 0)
	ts := []Tile{tile}
	p := NewPlan(cfg, mode, rng, ts)
	r := rendered{img: make([]byte, 3*s*s), mask: make([]byte, s*s)}
	if err := Render(r.img, &p, ts, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	var l Labels
	BuildLabels(&l, cfg, &p, ts)
	r.n = l.N()
	if r.n > 0 {
		copy(r.box[:], l.Boxes[:4])
		var z raster.Rasterizer
		if err := z.Dense(r.mask, raster.Grid{Rows: s, Cols: s, Stride: 1}, l.Rings(nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// flipPlane mirrors an s×s plane: vertically (y → s−1−y), horizontally, or both.
func flipPlane(p []byte, s int, ud, lr bool) []byte {
	out := make([]byte, len(p))
	for y := 0; y < s; y++ {
		for x := 0; x < s; x++ {
			sy, sx := y, x
			if ud {
				sy = s - 1 - y
			}
			if lr {
				sx = s - 1 - x
			}
			out[y*s+x] = p[sy*s+sx]
		}
	}
	return out
}

// A flip mirrors the image, the box and the mask together, as Ultralytics'
// RandomFlip does (flipud: y → h−y; fliplr: x → w−x), in training modes
// only; probability 0 takes no draw, so the rest of the plan is unchanged.
func TestFlipsMoveImageBoxAndMaskTogether(t *testing.T) {
	const s = 64
	// An off-centre rectangle: every flip moves it somewhere else.
	tile := shapeImage(s, s, []float32{8, 4, 24, 4, 24, 16, 8, 16})
	base := still(s)
	plain := renderOne(t, &base, TrainNoMosaic, 1, tile)
	if plain.n != 1 || plain.box != [4]float32{8, 4, 24, 16} {
		t.Fatalf("unflipped: %d instances, box %v", plain.n, plain.box)
	}
	for _, tc := range []struct {
		name   string
		ud, lr float64
		mode   Mode
		box    [4]float32
		fud    bool // the image and mask flip vertically
		flr    bool
	}{
		{"flipud", 1, 0, TrainNoMosaic, [4]float32{8, 48, 24, 60}, true, false},
		{"fliplr", 0, 1, TrainNoMosaic, [4]float32{40, 4, 56, 16}, false, true},
		{"both", 1, 1, TrainNoMosaic, [4]float32{40, 48, 56, 60}, true, true},
		{"flipud in mosaic mode", 1, 0, Train, [4]float32{8, 48, 24, 60}, true, false},
		{"validation never flips", 1, 1, Val, [4]float32{8, 4, 24, 16}, false, false},
		{"probability 0", 0, 0, TrainNoMosaic, [4]float32{8, 4, 24, 16}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.FlipUD, cfg.FlipLR = tc.ud, tc.lr
			got := renderOne(t, &cfg, tc.mode, 1, tile)
			if got.n != 1 || got.box != tc.box {
				t.Errorf("box %v (%d instances), want %v", got.box, got.n, tc.box)
			}
			if want := flipPlane(plain.mask, s, tc.fud, tc.flr); !bytes.Equal(got.mask, want) {
				t.Error("mask is not the unflipped mask mirrored")
			}
			for c := 0; c < 3; c++ {
				want := flipPlane(plain.img[c*s*s:(c+1)*s*s], s, tc.fud, tc.flr)
				if !bytes.Equal(got.img[c*s*s:(c+1)*s*s], want) {
					t.Errorf("channel %d is not the unflipped image mirrored", c)
				}
			}
		})
	}
}

// With probability bgr a training image comes out with its channels in
// BGR order (Ultralytics' Format keeps cv2's BGR with probability bgr),
// its labels and masks unchanged; validation is always RGB.
func TestBGRSwapsChannelsOnly(t *testing.T) {
	const s = 32
	tile := shapeImage(s, s, []float32{4, 4, 20, 4, 20, 12, 4, 12})
	base := still(s)
	base.HSVH, base.HSVS, base.HSVV = 0.015, 0.7, 0.4 // the swap follows HSV
	for _, tc := range []struct {
		name    string
		bgr     float64
		mode    Mode
		swapped bool
	}{
		{"bgr 1", 1, TrainNoMosaic, true},
		{"bgr 1, mosaic mode", 1, Train, true},
		{"bgr 0", 0, TrainNoMosaic, false},
		{"validation", 1, Val, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := renderOne(t, &base, tc.mode, 7, tile)
			cfg := base
			cfg.BGR = tc.bgr
			got := renderOne(t, &cfg, tc.mode, 7, tile)
			r, g, b := ref.img[:s*s], ref.img[s*s:2*s*s], ref.img[2*s*s:]
			want := append(append(append([]byte(nil), r...), g...), b...)
			if tc.swapped {
				want = append(append(append([]byte(nil), b...), g...), r...)
			}
			if !bytes.Equal(got.img, want) {
				t.Error("image is not the reference with red and blue planes as wanted")
			}
			if bytes.Equal(r, b) {
				t.Fatal("test image has equal red and blue planes: it cannot see a swap")
			}
			if got.box != ref.box || !bytes.Equal(got.mask, ref.mask) {
				t.Errorf("labels changed: box %v, want %v", got.box, ref.box)
			}
		})
	}
}

// Scale is a gain (factor U[1−scale, 1+scale]) or, with scale_max set, a
// range (factor U[scale_min, scale_max]), as Ultralytics' scale takes a
// float or a (min, max) tuple. A range equal to the gain's interval draws
// the same factors; a range that holds no image is refused.
func TestScaleGainOrRange(t *testing.T) {
	factor := func(cfg *Config, seed uint64) float64 {
		p := NewPlan(cfg, TrainNoMosaic, order.NewRand(seed, order.StreamSample, 0, 0), []Tile{{Img: &Image{W: 8, H: 8, Pix: make([]byte, 3*64)}}})
		return p.M[0] // no rotation or shear: M's x scale is the factor
	}
	for _, tc := range []struct {
		name       string
		gain       float64
		lo, hi     float64
		wantLo     float64
		wantHi     float64
		sameAsGain float64 // -1: no comparison
		err        string
	}{
		{"gain", 0.5, 0, 0, 0.5, 1.5, -1, ""},
		{"range equal to the gain's interval", 0.9, 0.5, 1.5, 0.5, 1.5, 0.5, ""},
		{"range above 1", 0.5, 1.5, 3, 1.5, 3, -1, ""},
		{"fixed factor", 0.5, 2, 2, 2, 2, -1, ""},
		{"range without its low end", 0.5, 0, 2, 0, 0, -1, "want 0 < scale_min <= scale_max"},
		{"reversed range", 0.5, 2, 1, 0, 0, -1, "want 0 < scale_min <= scale_max"},
		{"low end alone", 0.5, 1, 0, 0, 0, -1, "want 0 < scale_min <= scale_max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := still(64)
			cfg.Scale, cfg.ScaleMin, cfg.ScaleMax = tc.gain, tc.lo, tc.hi
			if err := cfg.Validate(); tc.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
					t.Fatalf("Validate: %v, want %q", err, tc.err)
				}
				return
			} else if err != nil {
				t.Fatal(err)
			}
			ref := still(64)
			ref.Scale = tc.sameAsGain
			for seed := uint64(0); seed < 200; seed++ {
				f := factor(&cfg, seed)
				if !(f >= tc.wantLo && f <= tc.wantHi) {
					t.Fatalf("seed %d: factor %v outside [%v, %v]", seed, f, tc.wantLo, tc.wantHi)
				}
				if tc.sameAsGain >= 0 {
					if g := factor(&ref, seed); g != f {
						t.Fatalf("seed %d: range draws %v, gain %v", seed, f, g)
					}
				}
			}
		})
	}
}
