package augment

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/segpipe/segpipe/pipeline/order"
)

// WantMixup draws whether a Train sample is blended with a second one
// (Config.Mixup; Ultralytics turns mixup off with mosaic in the last
// epochs, so TrainNoMosaic never mixes). Call it after NewPlan with the
// same generator: the draw is taken only when Mixup > 0, so that every
// other draw stays where it was.
func WantMixup(cfg *Config, mode Mode, rng *rand.PCG) bool {
	if mode != Train || cfg.Mixup <= 0 {
		return false
	}
	return order.Float(rng) < cfg.Mixup
}

// NewMixPlan draws the plan of p's mixup partner, as Ultralytics' MixUp
// prepares its second image: its own mosaic (tiles holds 4 tiles when
// WantMosaic, drawn with rng right after WantMixup, says so, else 1) and
// random perspective, then the blend ratio r ~ Beta(32, 32). The flips and
// channel order are p's, because Ultralytics applies them (and HSV) to
// the blended image. RenderMix renders the pair; BuildLabels with this
// plan appends the partner's instances after p's.
func NewMixPlan(cfg *Config, p *Plan, rng *rand.PCG, tiles []Tile) Plan {
	q := newGeometry(cfg, Train, rng, tiles, p.W, p.H)
	q.flipUD, q.flipLR, q.BGR = p.flipUD, p.flipLR, p.BGR
	q.M = q.flipped(q.M)
	q.Minv = inv3(q.M)
	q.mixW, q.mixOn = betaWeight(rng), true
	return q
}

// betaWeight draws r ~ Beta(32, 32) as the 32nd smallest of 63 uniforms
// (the order statistic that has that law), in integers only, and returns
// it rounded to a multiple of 1/65536: the same on every architecture,
// where a gamma sampler's logarithms need not be.
func betaWeight(rng *rand.PCG) uint32 {
	var u [63]uint64
	for i := range u {
		u[i] = rng.Uint64() >> 11 // 53 bits, as order.Float
	}
	slices.Sort(u[:])
	return uint32((u[31] + 1<<36) >> 37) // round(u/2^53 · 2^16)
}

// MixWeight returns q's blend ratio r (the weight of the first sample), a
// multiple of 1/65536; 0 for a plan that is not a mixup partner's.
func (q *Plan) MixWeight() float64 { return float64(q.mixW) / 65536 }

// Part is a second sample of a mix: a plan from NewMixPlan, NewCutPlan or
// NewPastePlan (after Paste) and its tiles.
type Part struct {
	Plan  *Plan
	Tiles []Tile
	// Paste is the part's own copy-paste (PartnerPaste.Part: its own
	// instances mirrored in flip mode, a further sample's in mixup mode),
	// applied to the part's rendering before it is mixed in, as
	// Ultralytics draws MixUp's and CutMix's partners through the same
	// mosaic and CopyPaste as the sample; nil for none.
	Paste *Part
}

// RenderMix writes the sample (p, tiles) mixed with parts into dst, in
// Ultralytics' order: the sample rendered with its own geometry, then
// for each part its own rendering either blended in (a mixup partner:
// ⌊a·r + b·(1−r)⌋ per byte, r exact in 1/65536, so the floor is exact) or
// its region copied over (a cutmix partner) or the pixels Paste chose
// copied over (a copy-paste source), then p's HSV jitter on the
// result. scratch holds a part's image: len(dst) bytes, twice that when a
// part has its own Paste (MixScratch).
func RenderMix(dst, scratch []byte, p *Plan, tiles []Tile, parts []Part, fill uint8) error {
	if len(scratch) != MixScratch(len(dst), parts) {
		return fmt.Errorf("augment: mix scratch of %d bytes for %d", len(scratch), len(dst))
	}
	a := *p
	a.hsv.on = false
	if err := Render(dst, &a, tiles, fill); err != nil {
		return err
	}
	for _, pt := range parts {
		part := scratch[:len(dst)]
		if err := Render(part, pt.Plan, pt.Tiles, fill); err != nil {
			return fmt.Errorf("mix partner: %w", err)
		}
		if pt.Paste != nil {
			if err := mixIn(part, scratch[len(dst):], pt.Paste, fill); err != nil {
				return fmt.Errorf("mix partner's copy-paste: %w", err)
			}
		}
		if err := composite(dst, part, pt.Plan); err != nil {
			return err
		}
	}
	if p.hsv.on {
		tab := hsvTables.Get().(*hsvTable)
		defer hsvTables.Put(tab)
		tab.build(&p.hsv)
		s := p.Out
		ss := s * s
		R, G, B := dst[:ss], dst[ss:2*ss], dst[2*ss:]
		if p.BGR {
			R, B = B, R
		}
		for row := 0; row < ss; row += s {
			tab.applyRow(R[row:row+s], G[row:row+s], B[row:row+s])
		}
		fillOutside(dst, p, fill)
	}
	return nil
}

// MixScratch is the scratch RenderMix needs for an image of n bytes.
func MixScratch(n int, parts []Part) int {
	for _, pt := range parts {
		if pt.Paste != nil {
			return 2 * n
		}
	}
	return n
}

// mixIn renders part pt into scratch and composites it into dst.
func mixIn(dst, scratch []byte, pt *Part, fill uint8) error {
	if err := Render(scratch, pt.Plan, pt.Tiles, fill); err != nil {
		return err
	}
	return composite(dst, scratch, pt.Plan)
}

// composite puts a part's rendering src into dst as its plan says.
func composite(dst, src []byte, q *Plan) error {
	switch {
	case q.mixOn:
		blend(dst, src, q.mixW)
	case q.cutOn:
		cutRegion(dst, src, q)
	case q.pasteOn:
		if len(q.paste) != q.Out*q.Out {
			return fmt.Errorf("augment: copy-paste plan without Paste's pixels")
		}
		pasteMasked(dst, src, q.paste)
	default:
		return fmt.Errorf("augment: mix partner plan from none of NewMixPlan, NewCutPlan and NewPastePlan")
	}
	return nil
}

// blend sets dst to ⌊dst·w + src·(65536−w)⌋ / 65536 per byte.
func blend(dst, src []byte, w uint32) {
	src = src[:len(dst)]
	iw := 65536 - w
	for i := range dst {
		dst[i] = uint8((uint32(dst[i])*w + uint32(src[i])*iw) >> 16)
	}
}
