package augment

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// The values of Config.CopyPasteMode.
const (
	PasteFlip  = "flip"
	PasteMixup = "mixup"
)

// pasteIoA is Ultralytics' CopyPaste threshold: a candidate is pasted only
// where its box covers less than this share of every existing box.
const pasteIoA = 0.30

// WantCopyPaste reports whether a Train sample gets a copy-paste
// (Config.CopyPaste; Ultralytics turns it off with mosaic, so
// TrainNoMosaic never pastes). Call it right after NewPlan with the same
// generator. Flip mode draws nothing (Ultralytics pastes the share
// CopyPaste of the eligible instances of every sample); mixup mode draws
// the probability CopyPaste, and only when CopyPaste > 0, so that every
// other draw stays where it was.
func WantCopyPaste(cfg *Config, mode Mode, rng *rand.PCG) bool {
	if mode != Train || cfg.CopyPaste <= 0 {
		return false
	}
	if cfg.CopyPasteMode != PasteMixup {
		return true
	}
	return order.Float(rng) < cfg.CopyPaste
}

// NewPastePlan returns the plan of the paste's source for sample p. Flip
// mode: p's own tiles mirrored left-right on the source canvas, before the
// random perspective, as Ultralytics pastes on the mosaic (or the resized
// image) before its affine: M·F with F: x → a−x, a the canvas side of a
// mosaic, else the letterboxed image's left plus right edge. No draw is
// taken; tiles are p's. Mixup mode: a second sample as NewMixPlan draws
// its geometry (its own mosaic and random perspective, with p's flips and
// channel order, no ratio); tiles are its own (4 when WantMosaic, drawn
// with rng right after WantCopyPaste, says so, else 1).
func NewPastePlan(cfg *Config, p *Plan, rng *rand.PCG, tiles []Tile) Plan {
	var q Plan
	if cfg.CopyPasteMode == PasteMixup {
		q = newGeometry(cfg, Train, rng, tiles, p.W, p.H)
		q.flipUD, q.flipLR, q.BGR = p.flipUD, p.flipLR, p.BGR
		q.M = q.flipped(q.M)
	} else {
		q = *p
		q.hsv = hsv{}
		q.mixOn, q.cutOn = false, false
		q.mirror = mirrorAxis(p)
		q.M = mul3(p.M, [9]float64{-1, 0, q.mirror, 0, 1, 0, 0, 0, 1})
		q.pasteFlip = true
	}
	q.Minv = inv3(q.M)
	q.pasteOn = true
	return q
}

// mirrorAxis returns a of the source canvas mirror x → a−x: the mosaic
// canvas side, or the letterboxed image's left plus right edge, so that
// the image maps onto itself as Ultralytics flips it (cv2.flip).
func mirrorAxis(p *Plan) float64 {
	if p.NTiles == 4 {
		return float64(p.Sc)
	}
	return float64(p.Rect[0].X0) + float64(p.Rect[0].X1)
}

// PartnerPaste is a mix partner's own copy-paste (Ultralytics draws
// MixUp's and CutMix's partners through the sample's pre-transform,
// CopyPaste included): its plan and the Paster whose pixels back it until
// RenderMix. Keep one per partner per worker.
type PartnerPaste struct {
	// Src is the paste's source in mixup mode: a further sample's tiles,
	// which the caller draws (WantCopyPaste, after the partner's own
	// draws) and loads; nil for no paste. Flip mode pastes from the
	// partner's own tiles and ignores Src.
	Src []Tile

	plan   Plan
	paster Paster
	part   Part
	on     bool
}

// Apply pastes into partner q (its tiles, its labels l[from:]) as Paste
// pastes into a sample: in flip mode its own instances mirrored, in mixup
// mode Src's, and reports whether anything was pasted. A nil pp, a
// CopyPaste of 0 or a mixup mode without Src does nothing.
func (pp *PartnerPaste) Apply(cfg *Config, q *Plan, rng *rand.PCG, tiles []Tile, l *Labels, from int) bool {
	if pp == nil {
		return false
	}
	pp.on = false
	src := tiles
	if cfg.CopyPasteMode == PasteMixup {
		src = pp.Src
	}
	if cfg.CopyPaste <= 0 || src == nil {
		return false
	}
	pp.plan = NewPastePlan(cfg, q, rng, src)
	pp.on = Paste(l, cfg, &pp.plan, src, from, &pp.paster)
	pp.part = Part{Plan: &pp.plan, Tiles: src}
	return pp.on
}

// Part returns the paste as the Part.Paste of the partner's Part, nil
// when the last Apply pasted nothing.
func (pp *PartnerPaste) Part() *Part {
	if pp == nil || !pp.on {
		return nil
	}
	return &pp.part
}

// Paster holds the scratch of Paste. Keep one per worker: its buffers are
// reused.
type Paster struct {
	part    Labels      // mixup mode: the partner's labels
	out     Labels      // the labels rebuilt after occlusion
	exist   []geom.Rect // the boxes a candidate is measured against
	cand    []pasteCand
	regions []region // what each pasted instance covers, in paste order
	pts     []float32
	mask    []byte // the output pixels the paste copies (Out², 1 = copy)
	z       raster.Rasterizer
	xs      []float64
	iv, pv  []span32
	rects   []openRect
	rings   [][]float32
	occ     [][]float32
	cuts    []cut
	a, b    []float32
	act     [2][]int
}

// pasteCand is an instance that may be pasted: its index (tile and
// instance, or the partner's label) and its box as it would be pasted.
type pasteCand struct {
	ti, ii int
	box    geom.Rect
	maxIoA float64
}

// region is a pasted instance's rings on the output canvas (into
// Paster.pts) and their bounds; inst is its index in the labels, -1 when
// the candidate rule dropped it (its pixels are pasted all the same).
type region struct {
	p0, p1 int   // Paster.pts range
	ends   []int // ring ends into Paster.pts
	bounds geom.Rect
	inst   int
}

type span32 struct{ x0, x1 int32 }

// Paste applies the copy-paste of plan q (from NewPastePlan) to the
// sample whose labels are l[from:]: it chooses the instances to paste as
// Ultralytics' CopyPaste does, appends them to l, cuts what they cover out
// of the instances below them (package doc, "Copy-paste") and records the
// pixels to copy, which RenderMix applies when given Part{q, tiles}. tiles
// are p's in flip mode, the partner's in mixup mode. It reports whether
// anything was pasted; when not, leave q out of RenderMix.
func Paste(l *Labels, cfg *Config, q *Plan, tiles []Tile, from int, ps *Paster) bool {
	ps.exist, ps.cand, ps.regions, ps.pts = ps.exist[:0], ps.cand[:0], ps.regions[:0], ps.pts[:0]
	w, h := q.live()
	out := geom.Rect{X0: 0, Y0: 0, X1: float32(w), Y1: float32(h)}
	if q.pasteFlip {
		ps.flipCandidates(cfg, q, tiles)
	} else {
		ps.part.Reset()
		BuildLabels(&ps.part, cfg, q, tiles)
		for k := from; k < l.N(); k++ {
			ps.exist = append(ps.exist, box(l.Boxes, k))
		}
		crowd := 0
		for k := 0; k < ps.part.N(); k++ {
			if crowd < len(ps.part.Crowd) && ps.part.Crowd[crowd].Inst == k {
				crowd++ // crowd regions and RLE masks are not pasted
				continue
			}
			ps.cand = append(ps.cand, pasteCand{ii: k, box: box(ps.part.Boxes, k)})
		}
	}
	if len(ps.exist) == 0 {
		return false // Ultralytics: nothing to paste without instances
	}
	// Ultralytics: candidates whose IoA with every existing box is under
	// the threshold, by increasing largest IoA (stable here: numpy's
	// quicksort leaves ties in an order of its own), the first
	// round(p·n), rounded half to even as Python's round.
	eligible := ps.cand[:0]
	for _, c := range ps.cand {
		c.maxIoA = 0
		ok := true
		for _, e := range ps.exist {
			v := ioa(c.box, e)
			ok = ok && v < pasteIoA
			c.maxIoA = max(c.maxIoA, v)
		}
		if ok {
			eligible = append(eligible, c)
		}
	}
	slices.SortStableFunc(eligible, func(a, b pasteCand) int {
		switch {
		case a.maxIoA < b.maxIoA:
			return -1
		case a.maxIoA > b.maxIoA:
			return 1
		}
		return 0
	})
	n := int(math.RoundToEven(float64(cfg.CopyPaste * float64(len(eligible)))))
	if n == 0 {
		return false
	}
	top := l.N()
	for _, c := range eligible[:n] {
		ps.add(l, cfg, q, tiles, c, out)
	}
	ps.occlude(l, cfg, from, top, q.Out)
	ps.paint(q)
	return true
}

// flipCandidates lists every instance of tiles on the source canvas as
// Ultralytics' mosaic leaves them (mapped, clipped to the tile's visible
// rectangle, empty ones gone): their boxes are the existing ones, and the
// ordinary polygon instances, mirrored by q, the candidates.
func (ps *Paster) flipCandidates(cfg *Config, q *Plan, tiles []Tile) {
	a, b := ps.a, ps.b
	defer func() { ps.a, ps.b = a, b }()
	for ti := range tiles {
		t := &tiles[ti]
		if t.Img == nil || q.Rect[ti].Empty() {
			continue
		}
		for ii := range t.Instances {
			in := &t.Instances[ii]
			if in.IsCrowd && !cfg.KeepCrowd {
				continue
			}
			bx := emptyRect()
			if in.RLE != nil || len(in.Polygons) == 0 {
				x, y, w, h := in.BBox[0], in.BBox[1], in.BBox[2], in.BBox[3]
				a = q.Place[ti].AppendRing(a[:0], []float32{x, y, x + w, y, x + w, y + h, x, y + h})
				b = geom.ClipRect(b[:0], a, q.Rect[ti])
				if r, ok := geom.Bounds(b); ok && len(b) > 0 {
					bx = r
				}
			} else {
				for _, ring := range in.Polygons {
					a = q.Place[ti].AppendRing(a[:0], ring)
					b = geom.ClipRect(b[:0], a, q.Rect[ti])
					if r, ok := geom.Bounds(b); ok && len(b) > 0 {
						bx = bx.Union(r)
					}
				}
			}
			if !(bx.X0 < bx.X1 && bx.Y0 < bx.Y1) {
				continue // zero area: Ultralytics' mosaic removes it
			}
			ps.exist = append(ps.exist, bx)
			if !in.IsCrowd && in.RLE == nil && len(in.Polygons) > 0 {
				m := float32(q.mirror)
				ps.cand = append(ps.cand, pasteCand{ti: ti, ii: ii, box: geom.Rect{X0: m - bx.X1, Y0: bx.Y0, X1: m - bx.X0, Y1: bx.Y1}})
			}
		}
	}
}

// add pastes candidate c: its rings on the output canvas into a region,
// and, when it passes the candidate rule (flip mode: after q's
// perspective, as Ultralytics' affine follows the paste; mixup mode: the
// partner's labels passed it already), as a new instance of l.
func (ps *Paster) add(l *Labels, cfg *Config, q *Plan, tiles []Tile, c pasteCand, out geom.Rect) {
	rg := region{p0: len(ps.pts), inst: -1, bounds: emptyRect()}
	if q.pasteFlip {
		in := &tiles[c.ti].Instances[c.ii]
		a, b := ps.a, ps.b
		for _, ring := range in.Polygons {
			a = q.Place[c.ti].AppendRing(a[:0], ring)
			b = geom.ClipRect(b[:0], a, q.Rect[c.ti])
			if len(b) == 0 {
				continue
			}
			applyM(b, &q.M)
			n0 := len(ps.pts)
			ps.pts = geom.ClipRect(ps.pts, b, out)
			if len(ps.pts) > n0 {
				rg.ends = append(rg.ends, len(ps.pts))
			}
		}
		ps.a, ps.b = a, b
		if l.addPolygon(cfg, q, c.ti, in, out) {
			rg.inst = l.N() - 1
		}
	} else {
		ps.rings = ps.part.Rings(ps.rings[:0], c.ii)
		for _, ring := range ps.rings {
			ps.pts = append(ps.pts, ring...)
			rg.ends = append(rg.ends, len(ps.pts))
			l.Pts = append(l.Pts, ring...)
			l.RingEnd = append(l.RingEnd, int32(len(l.Pts)))
		}
		l.InstEnd = append(l.InstEnd, int32(len(l.RingEnd)))
		l.Boxes = append(l.Boxes, ps.part.Boxes[4*c.ii:4*c.ii+4]...)
		l.Classes = append(l.Classes, ps.part.Classes[c.ii])
		rg.inst = l.N() - 1
		clear(ps.rings)
	}
	rg.p1 = len(ps.pts)
	if r, ok := geom.Bounds(ps.pts[rg.p0:rg.p1]); ok && rg.p1 > rg.p0 {
		rg.bounds = r
	}
	ps.regions = append(ps.regions, rg)
}

// regionRings appends region g's rings to dst.
func (ps *Paster) regionRings(dst [][]float32, g *region) [][]float32 {
	p0 := g.p0
	for _, e := range g.ends {
		dst = append(dst, ps.pts[p0:e])
		p0 = e
	}
	return dst
}

// paint records the output pixels the paste copies: those whose centre is
// inside a pasted region (the raster package's rule on a stride-1 grid),
// whether or not the candidate rule kept the instance, as Ultralytics
// draws every selected contour.
func (ps *Paster) paint(q *Plan) {
	s := q.Out
	if cap(ps.mask) < s*s {
		ps.mask = make([]byte, s*s)
	}
	ps.mask = ps.mask[:s*s]
	clear(ps.mask)
	g := raster.Grid{Rows: s, Cols: s, Stride: 1}
	for i := range ps.regions {
		ps.rings = ps.regionRings(ps.rings[:0], &ps.regions[i])
		// The grid and mask agree by construction; Fill refuses neither.
		_ = ps.z.Fill(ps.mask, g, ps.rings)
	}
	clear(ps.rings)
	q.paste = ps.mask
}

// pasteMasked copies the pixels of src that mask marks into dst (CHW
// planes of side s).
func pasteMasked(dst, src, mask []byte) {
	ss := len(mask)
	for c := 0; c < 3; c++ {
		d, s := dst[c*ss:(c+1)*ss], src[c*ss:(c+1)*ss]
		for i, m := range mask {
			if m != 0 {
				d[i] = s[i]
			}
		}
	}
}

// openRect is a run of lattice points [x0, x1) on rows [y0, y1).
type openRect struct{ x0, x1, y0, y1 int32 }

// cut is what occlusion does to one instance: keep it as it is (on
// false), drop it, or replace its rings by rects[r0:r1] with box bx.
type cut struct {
	on, drop bool
	r0, r1   int
	bx       geom.Rect
}

// occlude cuts the pasted regions out of the instances below them: the
// sample's, l[from:top], lie under every region; a pasted instance lies
// under the regions pasted after it. Crowd regions and RLE masks
// (Labels.Crowd) are left whole. See the package doc for the rule.
func (ps *Paster) occlude(l *Labels, cfg *Config, from, top, s int) {
	ps.cuts = slices.Grow(ps.cuts[:0], l.N())[:l.N()]
	clear(ps.cuts)
	ps.rects = ps.rects[:0]
	ncut := 0
	crowd := 0
	occ := ps.occ[:0]
	for k := from; k < l.N(); k++ {
		for crowd < len(l.Crowd) && l.Crowd[crowd].Inst < k {
			crowd++
		}
		if crowd < len(l.Crowd) && l.Crowd[crowd].Inst == k {
			continue
		}
		first := 0 // the first region above k
		if k >= top {
			first = slices.IndexFunc(ps.regions, func(g region) bool { return g.inst == k }) + 1
		}
		bk := box(l.Boxes, k)
		occ = occ[:0]
		for i := first; i < len(ps.regions); i++ {
			if g := &ps.regions[i]; overlaps(g.bounds, bk) {
				occ = ps.regionRings(occ, g)
			}
		}
		if len(occ) == 0 {
			continue
		}
		ps.rings = l.Rings(ps.rings[:0], k)
		before, after, r0 := ps.subtract(ps.rings, occ, bk, s)
		if after == before {
			ps.rects = ps.rects[:r0]
			continue // no lattice point under the paste: the polygon stays exact
		}
		c := cut{on: true, r0: r0, r1: len(ps.rects), bx: emptyRect()}
		for _, r := range ps.rects[r0:] {
			c.bx = c.bx.Union(geom.Rect{X0: float32(r.x0), Y0: float32(r.y0), X1: float32(r.x1), Y1: float32(r.y1)})
		}
		c.drop = after == 0 || !Candidate(cfg, bk, c.bx) || !(float64(after) > float64(cfg.MinArea*float64(before)))
		ps.cuts[k] = c
		ncut++
	}
	clear(ps.rings)
	clear(occ)
	ps.occ = occ[:0]
	if ncut == 0 {
		return
	}
	o := &ps.out
	o.Reset()
	crowd = 0
	for k := 0; k < l.N(); k++ {
		c := ps.cuts[k]
		changed := c.on
		isCrowd := crowd < len(l.Crowd) && l.Crowd[crowd].Inst == k
		if isCrowd {
			cr := l.Crowd[crowd]
			cr.Inst = o.N()
			o.Crowd = append(o.Crowd, cr)
			crowd++
		}
		if changed && c.drop {
			l.Dropped++
			continue
		}
		bx := box(l.Boxes, k)
		if changed {
			for _, r := range ps.rects[c.r0:c.r1] {
				x0, y0, x1, y1 := float32(r.x0), float32(r.y0), float32(r.x1), float32(r.y1)
				o.Pts = append(o.Pts, x0, y0, x1, y0, x1, y1, x0, y1)
				o.RingEnd = append(o.RingEnd, int32(len(o.Pts)))
			}
			bx = c.bx
		} else {
			for _, ring := range l.Rings(ps.rings[:0], k) {
				o.Pts = append(o.Pts, ring...)
				o.RingEnd = append(o.RingEnd, int32(len(o.Pts)))
			}
		}
		o.InstEnd = append(o.InstEnd, int32(len(o.RingEnd)))
		o.Boxes = append(o.Boxes, bx.X0, bx.Y0, bx.X1, bx.Y1)
		o.Classes = append(o.Classes, l.Classes[k])
	}
	clear(ps.rings)
	l.Boxes, o.Boxes = o.Boxes, l.Boxes
	l.Classes, o.Classes = o.Classes, l.Classes
	l.Pts, o.Pts = o.Pts, l.Pts
	l.RingEnd, o.RingEnd = o.RingEnd, l.RingEnd
	l.InstEnd, o.InstEnd = o.InstEnd, l.InstEnd
	l.Crowd, o.Crowd = o.Crowd, l.Crowd
}

// overlaps reports whether closed rectangles a and b share a point.
func overlaps(a, b geom.Rect) bool {
	return a.X0 <= b.X1 && b.X0 <= a.X1 && a.Y0 <= b.Y1 && b.Y0 <= a.Y1
}

// subtract appends to ps.rects the lattice points of the instance (the
// union of rings) that no occluder ring covers, as rectangles of whole
// runs merged down the rows, within bk (the instance's box) and the
// canvas [0, s)². before and after count the instance's lattice points
// before and after the cut; r0 is where its rectangles start.
//
// A lattice point (x, y) is inside a ring by the raster package's
// crossing test at exactly (x, y) (firstLattice corrects each run's ends
// with that comparison), and a rectangle [x0, x1)×[y, y1) holds exactly
// its lattice points under the same test. With an even stride each
// mask cell centre is a lattice point, so the cut instance's mask is the
// exact rule applied to "inside the instance and outside every pasted
// region", cell for cell.
func (ps *Paster) subtract(rings, occ [][]float32, bk geom.Rect, s int) (before, after, r0 int) {
	r0 = len(ps.rects)
	y0 := max(0, int(math.Ceil(float64(bk.Y0))))
	y1 := min(s, int(math.Ceil(float64(bk.Y1)))+1)
	active, next := ps.act[0][:0], ps.act[1][:0]
	defer func() { ps.act = [2][]int{active, next} }()
	for y := y0; y < y1; y++ {
		py := float64(y)
		ps.iv = ps.union(ps.iv[:0], rings, py, s)
		if len(ps.iv) == 0 {
			active = active[:0]
			continue
		}
		ps.pv = ps.union(ps.pv[:0], occ, py, s)
		next = next[:0]
		j := 0
		emit := func(x0, x1 int32) {
			if x1 <= x0 {
				return
			}
			after += int(x1 - x0)
			for j < len(active) && ps.rects[active[j]].x0 < x0 {
				j++
			}
			if j < len(active) {
				if r := &ps.rects[active[j]]; r.x0 == x0 && r.x1 == x1 && r.y1 == int32(y) {
					r.y1++
					next = append(next, active[j])
					return
				}
			}
			next = append(next, len(ps.rects))
			ps.rects = append(ps.rects, openRect{x0, x1, int32(y), int32(y) + 1})
		}
		k := 0
		for _, iv := range ps.iv {
			before += int(iv.x1 - iv.x0)
			x := iv.x0
			for ; k < len(ps.pv) && ps.pv[k].x1 <= x; k++ {
			}
			for q := k; q < len(ps.pv) && ps.pv[q].x0 < iv.x1; q++ {
				emit(x, min(ps.pv[q].x0, iv.x1))
				x = max(x, ps.pv[q].x1)
			}
			emit(x, iv.x1)
		}
		active, next = next, active
	}
	return before, after, r0
}

// union returns in dst the sorted, merged runs of lattice points of row
// py inside any of rings, within [0, s).
func (ps *Paster) union(dst []span32, rings [][]float32, py float64, s int) []span32 {
	for _, ring := range rings {
		dst = ps.latticeSpans(dst, ring, py, s)
	}
	slices.SortFunc(dst, func(a, b span32) int { return int(a.x0 - b.x0) })
	out := dst[:0]
	for _, v := range dst {
		if n := len(out); n > 0 && v.x0 <= out[n-1].x1 {
			out[n-1].x1 = max(out[n-1].x1, v.x1)
			continue
		}
		out = append(out, v)
	}
	return out
}

// latticeSpans appends the runs of integer x in [0, n) where (x, py) is
// inside ring by the crossing test, evaluated as the raster package
// evaluates it (the same expression, in float64 on the float32 vertices).
func (ps *Paster) latticeSpans(dst []span32, ring []float32, py float64, n int) []span32 {
	m := len(ring) &^ 1
	if m < 4 {
		return dst
	}
	xs := ps.xs[:0]
	x0, y0 := float64(ring[m-2]), float64(ring[m-1])
	for i := 0; i < m; i += 2 {
		x1, y1 := float64(ring[i]), float64(ring[i+1])
		if (y0 > py) != (y1 > py) {
			xc := x0 + (py-y0)*(x1-x0)/(y1-y0)
			if xc == xc {
				xs = append(xs, xc)
			}
		}
		x0, y0 = x1, y1
	}
	ps.xs = xs
	slices.Sort(xs)
	// k = #{xc <= x}; inside iff len(xs)-k is odd, for x in [xs[k-1], xs[k]).
	prev := 0
	for k := range xs {
		c := firstLattice(xs[k], n)
		if (len(xs)-k)&1 == 1 && c > prev {
			dst = append(dst, span32{int32(prev), int32(c)})
		}
		prev = c
	}
	return dst
}

// firstLattice returns the smallest x in [0, n] with float64(x) >= v, n
// when there is none.
func firstLattice(v float64, n int) int {
	f := math.Ceil(v)
	switch {
	case f != f:
		return n
	case f <= 0:
		return 0
	case f >= float64(n):
		return n
	}
	return int(f)
}
