package geom

import "math"

// Affine is a 2×3 matrix [a b c; d e f] mapping (x, y) to
// (a·x + b·y + c, d·x + e·y + f). Its maths is float64 so that a chain of
// augmentations composed with Mul rounds once, when points are written.
// The zero value maps everything to the origin; start from Identity.
type Affine [6]float64

// Identity returns the affine that leaves points unchanged.
func Identity() Affine { return Affine{1, 0, 0, 0, 1, 0} }

// Translate returns the affine that moves points by (tx, ty).
func Translate(tx, ty float64) Affine { return Affine{1, 0, tx, 0, 1, ty} }

// Scale returns the affine that scales about the origin.
func Scale(sx, sy float64) Affine { return Affine{sx, 0, 0, 0, sy, 0} }

// Rotate returns the affine that rotates by theta radians about the origin,
// clockwise on screen (y down), counter-clockwise in y-up coordinates.
func Rotate(theta float64) Affine {
	s, c := math.Sincos(theta)
	return Affine{c, -s, 0, s, c, 0}
}

// Mul returns the composition m·n: applying the result equals applying n
// first, then m.
func (m Affine) Mul(n Affine) Affine {
	return Affine{
		float64(m[0]*n[0]) + float64(m[1]*n[3]), float64(m[0]*n[1]) + float64(m[1]*n[4]), float64(m[0]*n[2]) + float64(m[1]*n[5]) + m[2],
		float64(m[3]*n[0]) + float64(m[4]*n[3]), float64(m[3]*n[1]) + float64(m[4]*n[4]), float64(m[3]*n[2]) + float64(m[4]*n[5]) + m[5],
	}
}

// Det returns m's determinant a·e − b·d: the factor by which m scales
// areas (its absolute value), negative when m mirrors.
func (m Affine) Det() float64 { return float64(m[0]*m[4]) - float64(m[1]*m[3]) }

// Invert returns the inverse of m. ok is false when m is singular or its
// determinant is not finite; the returned Affine is then the zero value.
func (m Affine) Invert() (inv Affine, ok bool) {
	det := m.Det()
	if det == 0 || math.IsNaN(det) || math.IsInf(det, 0) {
		return Affine{}, false
	}
	r := 1 / det
	a, b, d, e := m[4]*r, -m[1]*r, -m[3]*r, m[0]*r
	return Affine{a, b, -(float64(a*m[2]) + float64(b*m[5])), d, e, -(float64(d*m[2]) + float64(e*m[5]))}, true
}

// Apply maps one point.
func (m Affine) Apply(x, y float64) (float64, float64) {
	return float64(m[0]*x) + float64(m[1]*y) + m[2], float64(m[3]*x) + float64(m[4]*y) + m[5]
}

// AppendRing appends ring's vertices mapped by m to dst and returns the
// extended slice. dst may be ring[:0]: each output pair depends only on the
// input pair at the same position, so the transform can run in place.
func (m Affine) AppendRing(dst, ring []float32) []float32 {
	n := len(ring) &^ 1
	for i := 0; i < n; i += 2 {
		x, y := float64(ring[i]), float64(ring[i+1])
		dst = append(dst, float32(float64(m[0]*x)+float64(m[1]*y)+m[2]), float32(float64(m[3]*x)+float64(m[4]*y)+m[5]))
	}
	return dst
}
