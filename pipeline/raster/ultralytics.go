package raster

import (
	"errors"
	"fmt"
	"slices"
)

// Rule selects how a polygon instance becomes grid cells. The zero value
// is Exact.
type Rule uint8

const (
	// Exact is the crossing test at cell centres (the package doc's rule):
	// a cell is ON iff its centre is inside the instance.
	Exact Rule = iota
	// Ultralytics reproduces Ultralytics' polygon2mask cell for cell:
	// vertices truncated to integers, filled with OpenCV's fillPoly
	// (boundary pixels included) on the canvas, then resized to the grid
	// with INTER_LINEAR. See the package doc, "The Ultralytics rule".
	Ultralytics
)

var ruleNames = [...]string{Exact: "exact", Ultralytics: "ultralytics"}

// ErrRule reports a rule name or value this package does not know.
var ErrRule = errors.New("raster: unknown mask rule")

// String returns the rule's name as ParseRule reads it.
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return fmt.Sprintf("Rule(%d)", uint8(r))
}

// ParseRule returns the rule named s ("exact" or "ultralytics"); the empty
// string is Exact, the default.
func ParseRule(s string) (Rule, error) {
	if s == "" {
		return Exact, nil
	}
	for i, n := range ruleNames {
		if n == s {
			return Rule(i), nil
		}
	}
	return Exact, fmt.Errorf("%w %q (want exact or ultralytics)", ErrRule, s)
}

func (r Rule) check() error {
	if int(r) >= len(ruleNames) {
		return fmt.Errorf("%w: %d", ErrRule, uint8(r))
	}
	return nil
}

// maxUltraCoord bounds the truncated vertex coordinates of the Ultralytics
// rule. Ultralytics clips segments to the image before it fills them, so
// real inputs are far inside; the bound keeps OpenCV's int64 arithmetic
// (x<<16, products in line clipping) from overflowing for any float.
const maxUltraCoord = 1 << 24

// maxUltraCanvas bounds a canvas side under the Ultralytics rule, for the
// same reason.
const maxUltraCanvas = 1 << 24

// xyShift is OpenCV drawing's fixed-point shift (XY_SHIFT).
const xyShift = 16

// uedge is one non-horizontal edge of OpenCV's PolyEdge: rows [y0, y1),
// x in 16.16 fixed point at row y0, dx per row.
type uedge struct {
	y0, y1 int64
	x, dx  int64
}

// ival is a run [a, b] of ON canvas pixels in canvas row y.
type ival struct {
	y, a, b int64
}

// ultraSample returns the canvas offset of the first sampled pixel of a
// cell along one axis and how many are sampled (1 or 2). INTER_LINEAR
// maps output index i to source coordinate (i+0.5)·s − 0.5: for even s it
// falls halfway between pixels s·i+s/2−1 and s·i+s/2 (weights 1024 and
// 1024 of 2048), for odd s on pixel s·i+(s−1)/2 (weight 2048). At s = 2
// OpenCV switches to INTER_AREA, whose 2×2 mean reads the same pixels.
func ultraSample(s int64) (h0, k int64) {
	if s%2 == 0 {
		return s/2 - 1, 2
	}
	return (s - 1) / 2, 1
}

// ultraSpans fills z.spans with the ON runs of the Ultralytics rule.
func (z *Rasterizer) ultraSpans(g Grid) {
	z.spans = z.spans[:0]
	z.iv = z.iv[:0]
	s := int64(g.Stride)
	w, h := int64(g.Cols)*s, int64(g.Rows)*s
	if w == 0 || h == 0 {
		return
	}
	h0, k := ultraSample(s)
	for start := 0; start < len(z.ringOff); start++ {
		end := len(z.pts)
		if start+1 < len(z.ringOff) {
			end = z.ringOff[start+1]
		}
		z.ultraRing(z.pts[z.ringOff[start]:end], w, h, s, h0, k)
	}
	if len(z.iv) == 0 {
		return
	}
	z.iv = z.sortByRow(z.iv, &z.ivTmp)
	// Union per canvas row, so that a pixel drawn by several edges or
	// rings counts once.
	m := 0
	for _, v := range z.iv {
		if m > 0 && z.iv[m-1].y == v.y && v.a <= z.iv[m-1].b+1 {
			z.iv[m-1].b = max(z.iv[m-1].b, v.b)
			continue
		}
		z.iv[m] = v
		m++
	}
	iv := z.iv[:m]
	thr := int64(2) // of the four pixels at even s: (k² + 2) >> 2 rounding
	if k == 1 {
		thr = 1
	}
	cols := int64(g.Cols)
	for i := 0; i < len(iv); {
		r := iv[i].y / s
		j := i
		for j < len(iv) && iv[j].y/s == r {
			j++
		}
		ev := z.ev[:0]
		for _, v := range iv[i:j] {
			for q := int64(0); q < k; q++ {
				// Cells c with a <= s·c + h0 + q <= b.
				o := h0 + q
				c0, c1 := max(ceilDiv(v.a-o, s), 0), min(floorDiv(v.b-o, s), cols-1)
				if c0 <= c1 {
					// An event is c<<1 | 1 where a set starts, c<<1 where one ends.
					ev = append(ev, c0<<1|1, (c1+1)<<1)
				}
			}
		}
		z.ev = ev
		if len(ev) > 32 {
			slices.Sort(ev)
		} else {
			for a := 1; a < len(ev); a++ {
				v := ev[a]
				b := a
				for b > 0 && ev[b-1] > v {
					ev[b] = ev[b-1]
					b--
				}
				ev[b] = v
			}
		}
		n, on := int64(0), int64(-1)
		for e := 0; e < len(ev); {
			c := ev[e] >> 1
			for e < len(ev) && ev[e]>>1 == c {
				n += 2*(ev[e]&1) - 1
				e++
			}
			switch {
			case n >= thr && on < 0:
				on = c
			case n < thr && on >= 0:
				z.spans = append(z.spans, span{int32(r), int32(on), int32(c)})
				on = -1
			}
		}
		i = j
	}
}

// sortByRow orders v by row, then start, using tmp as scratch, and
// returns the sorted slice (v or tmp's array): a counting sort on the rows
// (they span at most the canvas height), then insertion sort within a row,
// which holds a few entries.
func (z *Rasterizer) sortByRow(v []ival, tmp *[]ival) []ival {
	if len(v) == 0 {
		return v
	}
	lo, hi := v[0].y, v[0].y
	for _, e := range v {
		lo, hi = min(lo, e.y), max(hi, e.y)
	}
	n := int(hi-lo) + 2
	if cap(z.rowStart) < n {
		z.rowStart = make([]int32, n)
	}
	start := z.rowStart[:n]
	clear(start)
	for _, e := range v {
		start[e.y-lo+1]++
	}
	for i := 1; i < n; i++ {
		start[i] += start[i-1]
	}
	out := slices.Grow((*tmp)[:0], len(v))[:len(v)]
	for _, e := range v {
		i := e.y - lo
		out[start[i]] = e
		start[i]++
	}
	*tmp = v[:0]
	for i := 1; i < len(out); i++ {
		e := out[i]
		j := i
		for j > 0 && out[j-1].y == e.y && out[j-1].a > e.a {
			out[j] = out[j-1]
			j--
		}
		out[j] = e
	}
	return out
}

// ultraPoints converts rings to the integer vertices Ultralytics fills
// (np.int32 of the float coordinates: truncation toward zero), into
// z.pts with z.ringOff marking where each ring starts. A ring with a NaN
// coordinate is dropped; coordinates beyond ±maxUltraCoord are clamped.
func (z *Rasterizer) ultraPoints(rings [][]float32) {
	z.pts, z.ringOff = z.pts[:0], z.ringOff[:0]
rings:
	for _, ring := range rings {
		n := len(ring) / 2
		if n == 0 {
			continue
		}
		for _, v := range ring[:2*n] {
			if v != v {
				continue rings
			}
		}
		z.ringOff = append(z.ringOff, len(z.pts))
		for _, v := range ring[:2*n] {
			var t int64
			switch {
			case v >= maxUltraCoord:
				t = maxUltraCoord
			case v <= -maxUltraCoord:
				t = -maxUltraCoord
			default:
				t = int64(v) // Go converts toward zero, as C does
			}
			z.pts = append(z.pts, t)
		}
	}
}

// ultraRing adds to z.iv the pixels of one ring's fillPoly on a w×h
// canvas that lie in sampled rows: each edge's 8-connected line, then the
// scanline fill of OpenCV's CollectPolyEdges and FillEdgeCollection.
func (z *Rasterizer) ultraRing(pts []int64, w, h, s, h0, k int64) {
	n := len(pts) / 2
	z.uedges = z.uedges[:0]
	px, py := pts[2*n-2], pts[2*n-1]
	for i := 0; i < n; i++ {
		cx, cy := pts[2*i], pts[2*i+1]
		z.ultraLine(px, py, cx, cy, w, h, s, h0, k)
		if py != cy {
			// The edge as CollectPolyEdges builds it: from the line's
			// clipped endpoints when one lies off the canvas.
			t0x, t0y, t1x, t1y := px, py, cx, cy
			c0y, c1y := py, cy
			if uint64(t0x) >= uint64(w) || uint64(t1x) >= uint64(w) || uint64(t0y) >= uint64(h) || uint64(t1y) >= uint64(h) {
				clipLine(w, h, &t0x, &t0y, &t1x, &t1y)
				if t0y != t1y {
					c0y, c1y = t0y, t1y
				}
			}
			c0x, c1x := t0x<<xyShift, t1x<<xyShift
			e := uedge{dx: (c1x - c0x) / (c1y - c0y)}
			if py < cy {
				e.y0, e.y1, e.x = py, cy, c0x+(py-c0y)*e.dx
			} else {
				e.y0, e.y1, e.x = cy, py, c1x+(cy-c1y)*e.dx
			}
			z.uedges = append(z.uedges, e)
		}
		px, py = cx, cy
	}
	if len(z.uedges) < 2 {
		return
	}
	// The edges active at row y are those with y0 <= y < y1, each at
	// x + (y − y0)·dx (FillEdgeCollection steps every one once a row);
	// sorted, consecutive pairs bound the runs [⌈xl⌉, ⌊xr⌋]. Each edge's
	// crossings with the sampled rows, bucketed by row, give them without
	// testing every edge on every row.
	xs := z.xing[:0]
	for _, e := range z.uedges {
		for y := firstSampled(max(e.y0, 0), s, h0, k); y < min(e.y1, h); y = nextSampled(y, s, h0, k) {
			xs = append(xs, ival{y: y, a: e.x + (y-e.y0)*e.dx})
		}
	}
	xs = z.sortByRow(xs, &z.xingTmp)
	z.xing = xs
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j].y == xs[i].y {
			j++
		}
		for p := i; p+1 < j; p += 2 {
			x1 := (xs[p].a + (1<<xyShift - 1)) >> xyShift
			x2 := xs[p+1].a >> xyShift
			if x1 < w && x2 >= 0 {
				x1, x2 = max(x1, 0), min(x2, w-1)
				if x1 <= x2 {
					z.iv = append(z.iv, ival{xs[i].y, x1, x2})
				}
			}
		}
		i = j
	}
}

// firstSampled returns the first sampled canvas row at or after y >= 0:
// rows s·r + h0 … s·r + h0 + k − 1.
func firstSampled(y, s, h0, k int64) int64 {
	m := y % s
	switch {
	case m < h0:
		return y - m + h0
	case m < h0+k:
		return y
	}
	return y - m + s + h0
}

// nextSampled returns the sampled row after sampled row y.
func nextSampled(y, s, h0, k int64) int64 {
	if y%s < h0+k-1 {
		return y + 1
	}
	return y - k + 1 + s
}

// ultraLine adds the sampled-row pixels of OpenCV's 8-connected line
// (LineIterator, left to right, clipped to the canvas) from (x1, y1) to
// (x2, y2), one run per row. Bresenham's walk has a closed form: with
// major length D and minor length d, the minor coordinate has advanced
// m(i) = max(0, ⌈(2d·i − D)/(2D)⌉) after i steps, so the pixels of the
// sampled rows are found without walking the others.
func (z *Rasterizer) ultraLine(x1, y1, x2, y2, w, h, s, h0, k int64) {
	if uint64(x1) >= uint64(w) || uint64(x2) >= uint64(w) || uint64(y1) >= uint64(h) || uint64(y2) >= uint64(h) {
		if !clipLine(w, h, &x1, &y1, &x2, &y2) {
			return
		}
	}
	if x2 < x1 {
		x1, y1, x2, y2 = x2, y2, x1, y1
	}
	dx, dy := x2-x1, y2-y1
	sy := int64(1)
	if dy < 0 {
		dy, sy = -dy, -1
	}
	ylo, yhi := min(y1, y2), max(y1, y2) // on the canvas after clipping
	for y := firstSampled(ylo, s, h0, k); y <= yhi; y = nextSampled(y, s, h0, k) {
		m := (y - y1) * sy // minor steps (x-major) or steps (y-major) to row y
		if dy > dx {
			// Major axis y: one pixel a row, at x1 + m(i) with i = m.
			x := x1 + max(0, ceilDiv(2*dx*m-dy, 2*dy))
			z.iv = append(z.iv, ival{y, x, x})
			continue
		}
		// Major axis x: row y holds the steps i with m(i) = m.
		ia, ib := int64(0), dx
		if dy > 0 {
			if m > 0 {
				ia = floorDiv(2*dx*(m-1)+dx, 2*dy) + 1
			}
			ib = min(floorDiv(2*dx*m+dx, 2*dy), dx)
		}
		if ia <= ib {
			z.iv = append(z.iv, ival{y, x1 + ia, x1 + ib})
		}
	}
}

// clipLine is OpenCV's clipLine on a w×h image (int64, C division):
// it moves the end points onto the image border and reports whether any
// part of the segment lies on the image. It may move points even when it
// reports false, as OpenCV's does, which CollectPolyEdges relies on.
func clipLine(w, h int64, x1, y1, x2, y2 *int64) bool {
	right, bottom := w-1, h-1
	if w <= 0 || h <= 0 {
		return false
	}
	code := func(x, y int64) int {
		c := 0
		if x < 0 {
			c |= 1
		}
		if x > right {
			c |= 2
		}
		if y < 0 {
			c |= 4
		}
		if y > bottom {
			c |= 8
		}
		return c
	}
	xcode := func(x int64) int {
		c := 0
		if x < 0 {
			c |= 1
		}
		if x > right {
			c |= 2
		}
		return c
	}
	c1, c2 := code(*x1, *y1), code(*x2, *y2)
	if c1&c2 == 0 && c1|c2 != 0 {
		if c1&12 != 0 {
			a := bottom
			if c1 < 8 {
				a = 0
			}
			*x1 += (a - *y1) * (*x2 - *x1) / (*y2 - *y1)
			*y1 = a
			c1 = xcode(*x1)
		}
		if c2&12 != 0 {
			a := bottom
			if c2 < 8 {
				a = 0
			}
			*x2 += (a - *y2) * (*x2 - *x1) / (*y2 - *y1)
			*y2 = a
			c2 = xcode(*x2)
		}
		if c1&c2 == 0 && c1|c2 != 0 {
			if c1 != 0 {
				a := right
				if c1 == 1 {
					a = 0
				}
				*y1 += (a - *x1) * (*y2 - *y1) / (*x2 - *x1)
				*x1 = a
				c1 = 0
			}
			if c2 != 0 {
				a := right
				if c2 == 1 {
					a = 0
				}
				*y2 += (a - *x2) * (*y2 - *y1) / (*x2 - *x1)
				*x2 = a
				c2 = 0
			}
		}
	}
	return c1|c2 == 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }
