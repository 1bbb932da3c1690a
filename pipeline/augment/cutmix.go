package augment

import (
	"math"
	"math/rand/v2"

	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
)

// WantCutmix draws whether a Train sample takes a region of another one
// (Config.Cutmix). Call it after WantMixup (and the mixup partner's plan)
// with the same generator; the draw is taken only when Cutmix > 0.
func WantCutmix(cfg *Config, mode Mode, rng *rand.PCG) bool {
	if mode != Train || cfg.Cutmix <= 0 {
		return false
	}
	return order.Float(rng) < cfg.Cutmix
}

// cutAreas is how many candidate regions Ultralytics' CutMix draws.
const cutAreas = 3

// NewCutPlan draws the plan of p's cutmix partner as Ultralytics' CutMix
// does: the partner's own mosaic (tiles: 4 when WantMosaic, drawn right
// after WantCutmix, says so) and random perspective, with p's flips and
// channel order; then three regions, each of side ⌊s·√(1−λ)⌋ (λ uniform,
// Beta(1,1)) around a centre drawn per axis from 0..s−1, halves truncated
// and clipped to the canvas; one of those that overlap no box of l (the
// sample's labels, a mixup partner's included) is chosen. The partner's
// labels are built into part (reset first). ok is false, as Ultralytics
// skips, when every region overlaps a box or when no partner box has at
// least 1 % of its area inside the chosen one (10 % when l has no
// instance); the draws are taken either way. With pp, the partner gets
// its own copy-paste (PartnerPaste.Apply; in mixup mode from pp.Src)
// before the regions are measured, as Ultralytics' CutMix draws its
// partner through the sample's pre-transform: its pasted instances can be
// cut in, and the partner's Part takes pp.Part() as its Paste.
func NewCutPlan(cfg *Config, p *Plan, rng *rand.PCG, tiles []Tile, l, part *Labels, pp *PartnerPaste) (q Plan, ok bool) {
	q = newGeometry(cfg, Train, rng, tiles, p.W, p.H)
	q.flipUD, q.flipLR, q.BGR = p.flipUD, p.flipLR, p.BGR
	q.M = q.flipped(q.M)
	q.Minv = inv3(q.M)
	part.Reset()
	BuildLabels(part, cfg, &q, tiles)
	pp.Apply(cfg, &q, rng, tiles, part, 0)
	s := p.Out
	var free [cutAreas]geom.Rect
	n := 0
	for range cutAreas {
		lam := order.Float(rng)
		side := int(float64(float64(s) * math.Sqrt(1-lam)))
		cx, cy := int(order.IntN(rng, uint64(s))), int(order.IntN(rng, uint64(s)))
		r := geom.Rect{
			X0: float32(min(max(cx-side/2, 0), s)), Y0: float32(min(max(cy-side/2, 0), s)),
			X1: float32(min(max(cx+side/2, 0), s)), Y1: float32(min(max(cy+side/2, 0), s)),
		}
		clear := true
		for k := 0; k < l.N() && clear; k++ {
			clear = ioa(r, box(l.Boxes, k)) <= 0
		}
		if clear {
			free[n] = r
			n++
		}
	}
	if n == 0 {
		return q, false
	}
	q.cut = free[order.IntN(rng, uint64(n))]
	q.cutOn = true
	q.cutMin = 0.01
	if l.N() == 0 {
		q.cutMin = 0.1
	}
	for k := 0; k < part.N(); k++ {
		if ioa(q.cut, box(part.Boxes, k)) >= q.cutMin {
			return q, true
		}
	}
	return q, false
}

// AppendCut appends to l the instances of part (the partner's labels from
// NewCutPlan) with at least q's share of their box inside q's region,
// their rings clipped to it (exactly, where Ultralytics clamps vertices)
// and their boxes the bounds of what is left. An instance whose mask is
// an RLE cannot be cut to the region and is left out (counted in
// l.Dropped), as is one whose rings miss the region.
func AppendCut(l *Labels, q *Plan, part *Labels) {
	crowd := 0
	var rings [][]float32
	for k := 0; k < part.N(); k++ {
		isCrowd := crowd < len(part.Crowd) && part.Crowd[crowd].Inst == k
		if isCrowd {
			crowd++
		}
		if ioa(q.cut, box(part.Boxes, k)) < q.cutMin {
			continue
		}
		if isCrowd && part.Crowd[crowd-1].RLE != nil {
			l.Dropped++
			continue
		}
		rings0, pts0 := len(l.RingEnd), len(l.Pts)
		after := emptyRect()
		for _, ring := range part.Rings(rings[:0], k) {
			n0 := len(l.Pts)
			l.Pts = geom.ClipRect(l.Pts, ring, q.cut)
			if len(l.Pts) > n0 {
				if r, ok := geom.Bounds(l.Pts[n0:]); ok {
					after = after.Union(r)
				}
				l.RingEnd = append(l.RingEnd, int32(len(l.Pts)))
			}
		}
		if len(l.RingEnd) == rings0 {
			l.Pts = l.Pts[:pts0]
			l.Dropped++
			continue
		}
		if isCrowd { // a crowd region given as polygons stays flagged
			l.Crowd = append(l.Crowd, Crowd{Inst: l.N()})
		}
		l.InstEnd = append(l.InstEnd, int32(len(l.RingEnd)))
		l.Boxes = append(l.Boxes, after.X0, after.Y0, after.X1, after.Y1)
		l.Classes = append(l.Classes, part.Classes[k])
	}
}

// CutRegion returns the region a cutmix partner's plan pastes (ok false
// for any other plan).
func (q *Plan) CutRegion() (geom.Rect, bool) { return q.cut, q.cutOn }

// cutRegion copies q's region of src into dst (CHW planes of side s).
func cutRegion(dst, src []byte, q *Plan) {
	s := q.Out
	x0, y0, x1, y1 := int(q.cut.X0), int(q.cut.Y0), int(q.cut.X1), int(q.cut.Y1)
	for c := 0; c < 3; c++ {
		for y := y0; y < y1; y++ {
			o := c*s*s + y*s
			copy(dst[o+x0:o+x1], src[o+x0:o+x1])
		}
	}
}

func box(b []float32, k int) geom.Rect {
	return geom.Rect{X0: b[4*k], Y0: b[4*k+1], X1: b[4*k+2], Y1: b[4*k+3]}
}

// ioa is Ultralytics' bbox_ioa: the intersection of a and b over b's area
// (plus 1e-7).
func ioa(a, b geom.Rect) float64 {
	w := math.Max(0, math.Min(float64(a.X1), float64(b.X1))-math.Max(float64(a.X0), float64(b.X0)))
	h := math.Max(0, math.Min(float64(a.Y1), float64(b.Y1))-math.Max(float64(a.Y0), float64(b.Y0)))
	return float64(w*h) / (float64(float64(b.X1-b.X0)*float64(b.Y1-b.Y0)) + 1e-7)
}
