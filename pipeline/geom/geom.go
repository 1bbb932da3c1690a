package geom

import "math"

// Ring is one closed polygon as flat x,y pairs (see the package doc).
type Ring = []float32

// Instance is a set of rings whose union is the instance's area.
type Instance = [][]float32

// Rect is an axis-aligned rectangle [X0, X1] × [Y0, Y1] in canvas pixels.
// A Rect with X1 < X0 or Y1 < Y0 is empty.
type Rect struct {
	X0, Y0, X1, Y1 float32
}

// Empty reports whether r contains no point.
func (r Rect) Empty() bool { return !(r.X0 <= r.X1 && r.Y0 <= r.Y1) }

// Union returns the smallest Rect containing r and o; an empty operand is
// ignored.
func (r Rect) Union(o Rect) Rect {
	switch {
	case o.Empty():
		return r
	case r.Empty():
		return o
	}
	return Rect{min(r.X0, o.X0), min(r.Y0, o.Y0), max(r.X1, o.X1), max(r.Y1, o.Y1)}
}

// Bounds returns the bounding box of ring's vertices, ignoring NaN
// coordinates. ok is false when the ring has no vertex with both
// coordinates non-NaN.
func Bounds(ring []float32) (r Rect, ok bool) {
	r = emptyRect()
	for i := 0; i+1 < len(ring); i += 2 {
		x, y := ring[i], ring[i+1]
		if x != x || y != y {
			continue
		}
		r.X0, r.X1 = min(r.X0, x), max(r.X1, x)
		r.Y0, r.Y1 = min(r.Y0, y), max(r.Y1, y)
		ok = true
	}
	return r, ok
}

// InstanceBounds returns the bounding box of every ring of an instance,
// with Bounds' rules.
func InstanceBounds(rings [][]float32) (r Rect, ok bool) {
	r = emptyRect()
	for _, ring := range rings {
		if b, k := Bounds(ring); k {
			r, ok = r.Union(b), true
		}
	}
	return r, ok
}

func emptyRect() Rect {
	inf := float32(math.Inf(1))
	return Rect{inf, inf, -inf, -inf}
}

// SignedArea returns the shoelace area of ring in float64. It is positive
// when the vertices run clockwise on screen (y down), i.e. counter-clockwise
// in the usual y-up orientation. For a self-intersecting ring it is the sum
// of the lobes' signed areas, not the area the even-odd rule covers.
func SignedArea(ring []float32) float64 {
	n := len(ring) / 2
	if n < 3 {
		return 0
	}
	// Sum relative to the first vertex: the cross products stay small for
	// rings far from the origin, which keeps the float64 sum accurate.
	ox, oy := float64(ring[0]), float64(ring[1])
	var s float64
	px, py := 0.0, 0.0
	for i := 1; i < n; i++ {
		x, y := float64(ring[2*i])-ox, float64(ring[2*i+1])-oy
		s += float64(px*y) - float64(x*py)
		px, py = x, y
	}
	return s / 2
}

// Area returns the absolute shoelace area of ring: the enclosed area of a
// simple (non-self-intersecting) ring.
func Area(ring []float32) float64 { return math.Abs(SignedArea(ring)) }
