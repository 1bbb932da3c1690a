package augment

import (
	"math"
	"math/rand/v2"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Image is a decoded image: W×H pixels, RGB interleaved, row-major,
// 3·W bytes a row.
type Image struct {
	W, H int
	Pix  []byte
}

// Tile is one source image of a sample with its annotations. Img nil means
// the image could not be decoded: its area is filled and it has no labels.
type Tile struct {
	Img       *Image
	Instances []shard.Instance
}

// Mode selects the augmentation pipeline of a sample.
type Mode int

const (
	// Train: mosaic with probability Config.Mosaic, then the random
	// affine, HSV and flip.
	Train Mode = iota
	// TrainNoMosaic: letterbox, random affine, HSV and flip (the last
	// close_mosaic epochs).
	TrainNoMosaic
	// Val: letterbox only, no randomness.
	Val
)

// Plan is everything random about one sample, drawn once, plus the derived
// mappings. Coordinates are continuous pixels: pixel k covers [k, k+1).
type Plan struct {
	Out int // output side s
	// W×H is the live output at the top left of the Out×Out canvas: the
	// perspective centres there, flips mirror it, labels are clipped to
	// it and Render fills the rest. Out×Out except from NewRectPlan; 0
	// reads as Out (a Plan built by hand).
	W, H   int
	Sc     int // source canvas side: 2s for a mosaic, s otherwise
	NTiles int
	Xc, Yc float64 // mosaic centre on the source canvas (tile split)

	// Place[i] maps tile i's image pixels onto the source canvas (resize to
	// long side s, then translate); Rect[i] is the part of the source canvas
	// it covers.
	Place [4]geom.Affine
	Rect  [4]geom.Rect

	// M maps the source canvas to the output (3×3, row-major, homogeneous;
	// affine when M[6] = M[7] = 0 and M[8] = 1). It includes the flip.
	M, Minv [9]float64

	// BGR: Render writes the channels in BGR order (Config.BGR).
	BGR bool

	hsv            hsv
	flipUD, flipLR bool   // composed into M
	mixOn          bool   // a mixup partner's plan (NewMixPlan)
	mixW           uint32 // its blend ratio: the sample's weight in 1/65536
	// A cutmix partner's plan (NewCutPlan): the region it pastes, and the
	// least share of a partner box inside it that keeps the instance.
	cut    geom.Rect
	cutOn  bool
	cutMin float64
	// A copy-paste source's plan (NewPastePlan): flip mode and its mirror
	// axis on the source canvas, and the output pixels Paste chose to copy.
	pasteOn, pasteFlip bool
	mirror             float64
	paste              []byte
}

// resized returns YOLO's load_image size: long side s, ceil, capped at s.
func resized(w0, h0, s int) (w, h int) {
	r := float64(s) / float64(max(w0, h0))
	if r == 1 {
		return w0, h0
	}
	return min(int(math.Ceil(float64(w0)*r)), s), min(int(math.Ceil(float64(h0)*r)), s)
}

func tileSize(t *Tile) (int, int) {
	if t.Img == nil {
		return 0, 0
	}
	return t.Img.W, t.Img.H
}

// NewPlan draws a sample's plan from rng. tiles holds 4 tiles for a mosaic
// (the caller decides mosaic with WantMosaic using the same rng first) and 1
// otherwise.
func NewPlan(cfg *Config, mode Mode, rng *rand.PCG, tiles []Tile) Plan {
	return newPlan(cfg, mode, rng, tiles, 0, 0)
}

// NewRectPlan is NewPlan for one tile whose output is the h×w rectangle
// at the top left of the ImgSz square (h, w ≤ ImgSz), as Ultralytics'
// rect training draws RandomPerspective to the batch's shape: the
// letterboxed image centred there by the perspective's translation, the
// flips mirroring that rectangle, labels clipped to it.
func NewRectPlan(cfg *Config, mode Mode, rng *rand.PCG, tile []Tile, h, w int) Plan {
	return newPlan(cfg, mode, rng, tile, w, h)
}

func newPlan(cfg *Config, mode Mode, rng *rand.PCG, tiles []Tile, w, h int) Plan {
	p := newGeometry(cfg, mode, rng, tiles, w, h)
	if mode != Val {
		if cfg.HSVH != 0 || cfg.HSVS != 0 || cfg.HSVV != 0 {
			gh := float64(order.Uniform(rng, -1, 1)*cfg.HSVH) + 1
			gs := float64(order.Uniform(rng, -1, 1)*cfg.HSVS) + 1
			gv := float64(order.Uniform(rng, -1, 1)*cfg.HSVV) + 1
			p.hsv.set(gh, gs, gv)
		}
		// Each draw is taken only when its setting is on, so that a new
		// setting at 0 leaves every other draw, and so the batches, as
		// they were. Ultralytics' order: flipud, fliplr, then bgr (Format).
		p.flipUD = cfg.FlipUD > 0 && order.Float(rng) < cfg.FlipUD
		p.flipLR = cfg.FlipLR > 0 && order.Float(rng) < cfg.FlipLR
		p.M = p.flipped(p.M)
		p.BGR = cfg.BGR > 0 && order.Float(rng) < cfg.BGR
	}
	p.Minv = inv3(p.M)
	return p
}

// flipped composes p's flips after m.
func (p *Plan) flipped(m [9]float64) [9]float64 {
	w, h := p.live()
	if p.flipUD {
		m = mul3([9]float64{1, 0, 0, 0, -1, float64(h), 0, 0, 1}, m)
	}
	if p.flipLR {
		m = mul3([9]float64{-1, 0, float64(w), 0, 1, 0, 0, 0, 1}, m)
	}
	return m
}

// live returns the plan's live output extent (W, H; Out for a 0).
func (p *Plan) live() (w, h int) {
	w, h = p.W, p.H
	if w <= 0 {
		w = p.Out
	}
	if h <= 0 {
		h = p.Out
	}
	return w, h
}

// newGeometry draws the placement of the tiles (the mosaic centre) and,
// unless mode is Val, the random perspective onto the live w×h output
// (0, 0: the whole square): M without the flips, Minv unset.
func newGeometry(cfg *Config, mode Mode, rng *rand.PCG, tiles []Tile, w, h int) Plan {
	s := cfg.ImgSz
	if w <= 0 || h <= 0 {
		w, h = s, s
	}
	p := Plan{Out: s, W: w, H: h, NTiles: len(tiles)}
	if len(tiles) == 4 {
		p.Sc = 2 * s
		// YOLO: centre uniform in [s/2, 3s/2), truncated to a pixel.
		p.Xc = math.Floor(order.Uniform(rng, float64(float64(s)/2), float64(1.5*float64(s))))
		p.Yc = math.Floor(order.Uniform(rng, float64(float64(s)/2), float64(1.5*float64(s))))
		canvas := geom.Rect{X0: 0, Y0: 0, X1: float32(p.Sc), Y1: float32(p.Sc)}
		for i := range tiles {
			w0, h0 := tileSize(&tiles[i])
			if w0 == 0 {
				p.Rect[i] = geom.Rect{X0: 1, X1: 0} // empty
				continue
			}
			w, h := resized(w0, h0, s)
			x0, y0 := p.Xc-float64(w), p.Yc-float64(h)
			if i&1 == 1 {
				x0 = p.Xc
			}
			if i&2 == 2 {
				y0 = p.Yc
			}
			p.Place[i] = geom.Affine{float64(w) / float64(w0), 0, x0, 0, float64(h) / float64(h0), y0}
			p.Rect[i] = intersect(geom.Rect{X0: float32(x0), Y0: float32(y0), X1: float32(x0 + float64(w)), Y1: float32(y0 + float64(h))}, canvas)
		}
	} else {
		p.Sc = s
		w0, h0 := tileSize(&tiles[0])
		if w0 == 0 {
			p.Rect[0] = geom.Rect{X0: 1, X1: 0}
		} else {
			w, h := resized(w0, h0, s)
			// YOLO letterbox: centred, extra pixel of an odd padding at the end.
			left := math.Round(float64(float64(s-w)/2) - 0.1)
			top := math.Round(float64(float64(s-h)/2) - 0.1)
			p.Place[0] = geom.Affine{float64(w) / float64(w0), 0, left, 0, float64(h) / float64(h0), top}
			p.Rect[0] = geom.Rect{X0: float32(left), Y0: float32(top), X1: float32(left + float64(w)), Y1: float32(top + float64(h))}
		}
	}
	p.M = [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}
	if mode != Val {
		p.M = randomPerspective(cfg, rng, float64(p.Sc), float64(w), float64(h))
	}
	return p
}

// WantMosaic draws whether a Train sample is a mosaic. It must be the first
// draw of the sample's stream so that the plan is identical whatever the
// caller does between the two calls.
func WantMosaic(cfg *Config, mode Mode, rng *rand.PCG) bool {
	if mode != Train || cfg.Mosaic <= 0 {
		return false
	}
	u := order.Float(rng)
	return u < cfg.Mosaic
}

// randomPerspective composes YOLO's M = T·S·R·P·C for a source canvas of
// side sc and an output of outW×outH.
func randomPerspective(cfg *Config, rng *rand.PCG, sc, outW, outH float64) [9]float64 {
	C := [9]float64{1, 0, -sc / 2, 0, 1, -sc / 2, 0, 0, 1}
	P := [9]float64{1, 0, 0, 0, 1, 0, order.Uniform(rng, -cfg.Perspective, cfg.Perspective), order.Uniform(rng, -cfg.Perspective, cfg.Perspective), 1}
	a := order.Uniform(rng, -cfg.Degrees, cfg.Degrees) * math.Pi / 180
	lo, hi := cfg.scaleRange()
	sg := order.Uniform(rng, lo, hi)
	// cv2.getRotationMatrix2D about the origin: positive angles turn
	// counter-clockwise on screen.
	al, be := sg*math.Cos(a), sg*math.Sin(a)
	R := [9]float64{al, be, 0, -be, al, 0, 0, 0, 1}
	S := [9]float64{1, math.Tan(order.Uniform(rng, -cfg.Shear, cfg.Shear) * math.Pi / 180), 0,
		math.Tan(order.Uniform(rng, -cfg.Shear, cfg.Shear) * math.Pi / 180), 1, 0, 0, 0, 1}
	T := [9]float64{1, 0, order.Uniform(rng, 0.5-cfg.Translate, 0.5+cfg.Translate) * outW,
		0, 1, order.Uniform(rng, 0.5-cfg.Translate, 0.5+cfg.Translate) * outH, 0, 0, 1}
	return mul3(T, mul3(S, mul3(R, mul3(P, C))))
}

// Affine returns M as a geom.Affine when it is affine (ok false with a
// perspective term).
func (p *Plan) Affine() (geom.Affine, bool) {
	m := p.M
	return geom.Affine{m[0], m[1], m[2], m[3], m[4], m[5]}, m[6] == 0 && m[7] == 0 && m[8] == 1
}

// ToCanvas returns the map from tile i's image pixels to the output canvas
// (the affine part of M when M has a perspective term).
func (p *Plan) ToCanvas(i int) geom.Affine {
	a, _ := p.Affine()
	return a.Mul(p.Place[i])
}

func mul3(a, b [9]float64) [9]float64 {
	var r [9]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			r[3*i+j] = float64(a[3*i]*b[j]) + float64(a[3*i+1]*b[3+j]) + float64(a[3*i+2]*b[6+j])
		}
	}
	return r
}

func inv3(m [9]float64) [9]float64 {
	a, b, c, d, e, f, g, h, k := m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]
	A, B, C := float64(e*k)-float64(f*h), -(float64(d*k) - float64(f*g)), float64(d*h)-float64(e*g)
	det := float64(a*A) + float64(b*B) + float64(c*C)
	if det == 0 {
		return [9]float64{}
	}
	r := 1 / det
	if g == 0 && h == 0 && k == 1 {
		// Affine: keep the last row exact. Computed, its (a·e−b·d)·(1/det)
		// is not always 1 in floating point, and Render would then take 14 %
		// of default plans down the slow projective per-pixel path.
		return [9]float64{
			A * r, -(float64(b*k) - float64(c*h)) * r, (float64(b*f) - float64(c*e)) * r,
			B * r, (float64(a*k) - float64(c*g)) * r, -(float64(a*f) - float64(c*d)) * r,
			0, 0, 1,
		}
	}
	return [9]float64{
		A * r, -(float64(b*k) - float64(c*h)) * r, (float64(b*f) - float64(c*e)) * r,
		B * r, (float64(a*k) - float64(c*g)) * r, -(float64(a*f) - float64(c*d)) * r,
		C * r, -(float64(a*h) - float64(b*g)) * r, (float64(a*e) - float64(b*d)) * r,
	}
}

func intersect(a, b geom.Rect) geom.Rect {
	return geom.Rect{X0: max(a.X0, b.X0), Y0: max(a.Y0, b.Y0), X1: min(a.X1, b.X1), Y1: min(a.Y1, b.Y1)}
}
