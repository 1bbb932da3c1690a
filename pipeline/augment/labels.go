package augment

import (
	"math"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/geom"
)

// Labels are a sample's surviving instances on the output canvas. Reset and
// reuse one per worker: appends reuse the slices' capacity.
type Labels struct {
	Boxes   []float32 // x1 y1 x2 y2 per instance
	Classes []int32
	Pts     []float32 // every kept ring's points, flat x,y
	RingEnd []int32   // per ring: end offset in Pts
	InstEnd []int32   // per instance: end index in RingEnd
	Crowd   []Crowd   // crowd instances (KeepCrowd only) and RLE-masked ones, by increasing Inst

	Dropped      int // instances removed by the candidate rule or clipped away
	CrowdSkipped int // crowd instances dropped (KeepCrowd false)

	a, b []float32
}

// Crowd is a kept instance that is not an ordinary polygon one: a crowd
// region, or (NotCrowd) an ordinary instance whose mask is an RLE, as
// SA-1B gives every mask. Rasterise RLE mapped by ToCanvas, or, when RLE
// is nil (a crowd region given as polygons), its rings like any other
// instance's. The batch flags it iscrowd unless NotCrowd.
type Crowd struct {
	Inst     int
	RLE      *shard.RLE
	ToCanvas geom.Affine
	NotCrowd bool
}

// Reset empties l, keeping capacity.
func (l *Labels) Reset() {
	l.Boxes, l.Classes, l.Pts = l.Boxes[:0], l.Classes[:0], l.Pts[:0]
	l.RingEnd, l.InstEnd, l.Crowd = l.RingEnd[:0], l.InstEnd[:0], l.Crowd[:0]
	l.Dropped, l.CrowdSkipped = 0, 0
}

// N returns the number of kept instances.
func (l *Labels) N() int { return len(l.Classes) }

// Rings appends instance k's rings (aliasing l.Pts) to dst.
func (l *Labels) Rings(dst [][]float32, k int) [][]float32 {
	r0 := int32(0)
	if k > 0 {
		r0 = l.InstEnd[k-1]
	}
	for r := r0; r < l.InstEnd[k]; r++ {
		p0 := int32(0)
		if r > 0 {
			p0 = l.RingEnd[r-1]
		}
		dst = append(dst, l.Pts[p0:l.RingEnd[r]])
	}
	return dst
}

// Candidate reports YOLO's box-candidate rule for segments: with box b
// before clipping to the output canvas and box a after, keep iff
// w_a > minSide, h_a > minSide, w_a·h_a > minArea·w_b·h_b and
// max(w_a/h_a, h_a/w_a) < maxAspect.
func Candidate(cfg *Config, before, after geom.Rect) bool {
	wb, hb := float64(before.X1-before.X0), float64(before.Y1-before.Y0)
	wa, ha := float64(after.X1-after.X0), float64(after.Y1-after.Y0)
	const eps = 1e-16
	ar := math.Max(wa/(ha+eps), ha/(wa+eps))
	return wa > cfg.MinSide && ha > cfg.MinSide && wa*ha > cfg.MinArea*wb*hb && ar < cfg.MaxAspect
}

// BuildLabels transforms every tile's instances into l (appending). Each
// polygon ring is mapped exactly (float64 maths, vertices only — affine and
// projective maps keep edges straight) onto the source canvas, clipped to
// its tile's visible rectangle, mapped by M, and clipped to the output
// canvas [0,s]². The box before clipping is the bounds of the mapped
// rings; after, the bounds of the clipped rings. (The output canvas is
// the plan's live W×H, [0,s]² but for NewRectPlan.) Instances failing
// Candidate or clipped away are dropped (counted in l.Dropped).
func BuildLabels(l *Labels, cfg *Config, p *Plan, tiles []Tile) {
	w, h := p.live()
	out := geom.Rect{X0: 0, Y0: 0, X1: float32(w), Y1: float32(h)}
	aff, isAffine := p.Affine()
	for ti := range tiles {
		t := &tiles[ti]
		if t.Img == nil || p.Rect[ti].Empty() {
			continue
		}
		for ii := range t.Instances {
			in := &t.Instances[ii]
			switch {
			case !in.IsCrowd && in.RLE == nil:
				l.addPolygon(cfg, p, ti, in, out)
			case !in.IsCrowd: // an ordinary instance whose mask is an RLE (SA-1B's form)
				if !isAffine {
					l.Dropped++ // an RLE has no edges to map through a perspective term
					continue
				}
				l.addRLE(cfg, p, ti, in, out, aff, false)
			case !cfg.KeepCrowd || (in.RLE != nil && !isAffine) || (in.RLE == nil && len(in.Polygons) == 0):
				l.CrowdSkipped++
			case in.RLE != nil:
				l.addRLE(cfg, p, ti, in, out, aff, true)
			default: // a crowd region given as polygons
				if l.addPolygon(cfg, p, ti, in, out) {
					l.Crowd = append(l.Crowd, Crowd{Inst: l.N() - 1})
				}
			}
		}
	}
}

// addPolygon adds in's rings and reports whether it was kept.
func (l *Labels) addPolygon(cfg *Config, p *Plan, ti int, in *shard.Instance, out geom.Rect) bool {
	pts0, rings0 := len(l.Pts), len(l.RingEnd)
	before, after := emptyRect(), emptyRect()
	for _, ring := range in.Polygons {
		l.a = p.Place[ti].AppendRing(l.a[:0], ring)
		l.b = geom.ClipRect(l.b[:0], l.a, p.Rect[ti])
		if len(l.b) == 0 {
			continue
		}
		applyM(l.b, &p.M)
		if r, ok := geom.Bounds(l.b); ok {
			before = before.Union(r)
		}
		n0 := len(l.Pts)
		l.Pts = geom.ClipRect(l.Pts, l.b, out)
		if len(l.Pts) > n0 {
			if r, ok := geom.Bounds(l.Pts[n0:]); ok {
				after = after.Union(r)
			}
			l.RingEnd = append(l.RingEnd, int32(len(l.Pts)))
		}
	}
	if len(l.RingEnd) == rings0 || !Candidate(cfg, before, after) {
		l.Pts, l.RingEnd = l.Pts[:pts0], l.RingEnd[:rings0]
		l.Dropped++
		return false
	}
	l.InstEnd = append(l.InstEnd, int32(len(l.RingEnd)))
	l.Boxes = append(l.Boxes, after.X0, after.Y0, after.X1, after.Y1)
	l.Classes = append(l.Classes, in.Class)
	return true
}

// addRLE adds an instance whose mask is in.RLE, its box from the mapped
// and clipped in.BBox; crowd says whether the batch flags it iscrowd.
func (l *Labels) addRLE(cfg *Config, p *Plan, ti int, in *shard.Instance, out geom.Rect, m geom.Affine, crowd bool) {
	x, y, w, h := in.BBox[0], in.BBox[1], in.BBox[2], in.BBox[3]
	l.a = p.Place[ti].AppendRing(l.a[:0], []float32{x, y, x + w, y, x + w, y + h, x, y + h})
	l.b = geom.ClipRect(l.b[:0], l.a, p.Rect[ti])
	if len(l.b) == 0 {
		l.Dropped++
		return
	}
	applyM(l.b, &p.M)
	before, _ := geom.Bounds(l.b)
	l.a = geom.ClipRect(l.a[:0], l.b, out)
	after, ok := geom.Bounds(l.a)
	if len(l.a) == 0 || !ok || !Candidate(cfg, before, after) {
		l.Dropped++
		return
	}
	l.Crowd = append(l.Crowd, Crowd{Inst: len(l.Classes), RLE: in.RLE, ToCanvas: m.Mul(p.Place[ti]), NotCrowd: !crowd})
	l.InstEnd = append(l.InstEnd, int32(len(l.RingEnd)))
	l.Boxes = append(l.Boxes, after.X0, after.Y0, after.X1, after.Y1)
	l.Classes = append(l.Classes, in.Class)
}

// applyM maps a flat ring through the homogeneous 3×3 M in place.
func applyM(ring []float32, m *[9]float64) {
	for i := 0; i+1 < len(ring); i += 2 {
		x, y := float64(ring[i]), float64(ring[i+1])
		z := float64(m[6]*x) + float64(m[7]*y) + m[8]
		ring[i] = float32((float64(m[0]*x) + float64(m[1]*y) + m[2]) / z)
		ring[i+1] = float32((float64(m[3]*x) + float64(m[4]*y) + m[5]) / z)
	}
}

func emptyRect() geom.Rect {
	inf := float32(math.Inf(1))
	return geom.Rect{X0: inf, Y0: inf, X1: -inf, Y1: -inf}
}
