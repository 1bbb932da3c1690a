package geom

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(a)+math.Abs(b)) }

func randAffine(rng *rand.Rand) Affine {
	return Translate(rng.Float64()*200-100, rng.Float64()*200-100).
		Mul(Rotate(rng.Float64() * 2 * math.Pi)).
		Mul(Scale(0.1+rng.Float64()*3, -(0.1 + rng.Float64()*3)))
}

func TestAffineMulAppliesRightOperandFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 1000; i++ {
		m, n := randAffine(rng), randAffine(rng)
		x, y := rng.Float64()*1000, rng.Float64()*1000
		wx, wy := m.Apply(n.Apply(x, y))
		gx, gy := m.Mul(n).Apply(x, y)
		if !near(gx, wx, 1e-12) || !near(gy, wy, 1e-12) {
			t.Fatalf("m·n(%v,%v) = (%v,%v), m(n(p)) = (%v,%v)", x, y, gx, gy, wx, wy)
		}
	}
}

func TestAffineInvert(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < 1000; i++ {
		m := randAffine(rng)
		inv, ok := m.Invert()
		if !ok {
			t.Fatalf("%v not invertible", m)
		}
		id := m.Mul(inv)
		for k, want := range Identity() {
			if !near(id[k], want, 1e-12) {
				t.Fatalf("m·m⁻¹ = %v", id)
			}
		}
	}
	for _, m := range []Affine{{}, Scale(0, 1), {1, 2, 0, 2, 4, 0}, {math.Inf(1), 0, 0, 0, 1, 0}, {math.NaN(), 0, 0, 0, 1, 0}} {
		if _, ok := m.Invert(); ok {
			t.Errorf("%v reported invertible", m)
		}
	}
}

func TestAffineConstructors(t *testing.T) {
	cases := []struct {
		name   string
		m      Affine
		x, y   float64
		wx, wy float64
	}{
		{"identity", Identity(), 3, 4, 3, 4},
		{"translate", Translate(1, -2), 3, 4, 4, 2},
		{"scale", Scale(2, 3), 3, 4, 6, 12},
		{"rotate quarter", Rotate(math.Pi / 2), 1, 0, 0, 1},
	}
	for _, tc := range cases {
		x, y := tc.m.Apply(tc.x, tc.y)
		if !near(x, tc.wx, 1e-15) || !near(y, tc.wy, 1e-15) {
			t.Errorf("%s: (%v,%v), want (%v,%v)", tc.name, x, y, tc.wx, tc.wy)
		}
	}
}

func TestAppendRingInPlaceAndAppend(t *testing.T) {
	m := Translate(10, 20).Mul(Scale(2, 0.5))
	ring := []float32{1, 2, 3, 4, 5, 6, 7}
	want := []float32{12, 21, 16, 22, 20, 23}
	got := m.AppendRing([]float32{9}, ring)
	if len(got) != 7 || got[0] != 9 {
		t.Fatalf("append: %v", got)
	}
	for i := range want {
		if got[i+1] != want[i] {
			t.Fatalf("append: %v, want 9 then %v", got, want)
		}
	}
	inPlace := m.AppendRing(ring[:0], ring)
	for i := range want {
		if inPlace[i] != want[i] {
			t.Fatalf("in place: %v, want %v", inPlace, want)
		}
	}
	buf := make([]float32, 0, 16)
	if a := testing.AllocsPerRun(100, func() { buf = m.AppendRing(buf[:0], ring[:6]) }); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

func TestArea(t *testing.T) {
	cases := []struct {
		name   string
		ring   []float32
		signed float64
	}{
		{"unit square clockwise on screen", []float32{0, 0, 1, 0, 1, 1, 0, 1}, 1},
		{"unit square reversed", []float32{0, 0, 0, 1, 1, 1, 1, 0}, -1},
		{"triangle", []float32{0, 0, 4, 0, 0, 3}, 6},
		{"far from origin", []float32{1e6, 1e6, 1e6 + 2, 1e6, 1e6 + 2, 1e6 + 3, 1e6, 1e6 + 3}, 6},
		{"bow tie lobes cancel", []float32{0, 0, 2, 2, 2, 0, 0, 2}, 0},
		{"degenerate", []float32{0, 0, 1, 1}, 0},
		{"collinear", []float32{0, 0, 1, 1, 2, 2}, 0},
		{"odd trailing value ignored", []float32{0, 0, 4, 0, 0, 3, 99}, 6},
	}
	for _, tc := range cases {
		if got := SignedArea(tc.ring); got != tc.signed {
			t.Errorf("%s: SignedArea %v, want %v", tc.name, got, tc.signed)
		}
		if got := Area(tc.ring); got != math.Abs(tc.signed) {
			t.Errorf("%s: Area %v", tc.name, got)
		}
	}
}

func TestBounds(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name string
		ring []float32
		want Rect
		ok   bool
	}{
		{"triangle", []float32{1, 5, -2, 3, 4, 9}, Rect{-2, 3, 4, 9}, true},
		{"point", []float32{1, 2}, Rect{1, 2, 1, 2}, true},
		{"nan ignored", []float32{nan, 5, 1, 2, 3, nan, 4, 6}, Rect{1, 2, 4, 6}, true},
		{"empty", nil, Rect{}, false},
		{"all nan", []float32{nan, nan}, Rect{}, false},
	}
	for _, tc := range cases {
		got, ok := Bounds(tc.ring)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	got, ok := InstanceBounds([][]float32{{0, 0, 1, 1}, nil, {5, -1, 6, 2}})
	if !ok || got != (Rect{0, -1, 6, 2}) {
		t.Errorf("InstanceBounds = %v %v", got, ok)
	}
	if _, ok := InstanceBounds(nil); ok {
		t.Error("InstanceBounds(nil) ok")
	}
}

// evenOdd is the classic crossing test, the membership rule of the
// rasteriser, used here to define what a correct clip must preserve.
func evenOdd(ring []float32, px, py float64) bool {
	n := len(ring) / 2
	in := false
	for i := 0; i < n; i++ {
		j := (i + 1) % n
		x0, y0 := float64(ring[2*i]), float64(ring[2*i+1])
		x1, y1 := float64(ring[2*j]), float64(ring[2*j+1])
		if (y0 > py) != (y1 > py) && px < x0+(py-y0)*(x1-x0)/(y1-y0) {
			in = !in
		}
	}
	return in
}

// distToRing is the distance from p to the nearest edge of ring.
func distToRing(ring []float32, px, py float64) float64 {
	n := len(ring) / 2
	d := math.Inf(1)
	for i := 0; i < n; i++ {
		j := (i + 1) % n
		x0, y0 := float64(ring[2*i]), float64(ring[2*i+1])
		x1, y1 := float64(ring[2*j]), float64(ring[2*j+1])
		dx, dy := x1-x0, y1-y0
		t := 0.0
		if l := dx*dx + dy*dy; l > 0 {
			t = math.Max(0, math.Min(1, ((px-x0)*dx+(py-y0)*dy)/l))
		}
		d = math.Min(d, math.Hypot(px-x0-t*dx, py-y0-t*dy))
	}
	return d
}

// TestClipRectPreservesMembership is the brute-force check of ClipRect: for
// random rings (convex, concave, self-intersecting) and many sample points
// away from every edge, a point is inside the clipped ring iff it is inside
// both the ring and the rectangle. Sutherland–Hodgman keeps the winding
// parity of points inside the rectangle, so this holds for any ring.
func TestClipRectPreservesMembership(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	var dst []float32
	checked := 0
	for i := 0; i < 3000; i++ {
		n := 3 + rng.IntN(20)
		ring := make([]float32, 2*n)
		cx, cy, size := rng.Float64()*100, rng.Float64()*100, 5+rng.Float64()*80
		for k := 0; k < n; k++ {
			if i%2 == 0 { // star: simple, often concave
				a := 2 * math.Pi * float64(k) / float64(n)
				r := size * (0.2 + rng.Float64())
				ring[2*k], ring[2*k+1] = float32(cx+r*math.Cos(a)), float32(cy+r*math.Sin(a))
			} else { // arbitrary, self-intersecting
				ring[2*k], ring[2*k+1] = float32(cx+size*(rng.Float64()-0.5)), float32(cy+size*(rng.Float64()-0.5))
			}
		}
		x0, y0 := float32(rng.IntN(80)), float32(rng.IntN(80))
		r := Rect{x0, y0, x0 + float32(1+rng.IntN(60)), y0 + float32(1+rng.IntN(60))}
		dst = append(dst[:0], -1, -1) // a prefix ClipRect must keep
		dst = ClipRect(dst, ring, r)
		if dst[0] != -1 || dst[1] != -1 {
			t.Fatal("prefix overwritten")
		}
		clipped := dst[2:]
		if len(clipped) > 0 {
			b, _ := Bounds(clipped)
			if b.X0 < r.X0 || b.Y0 < r.Y0 || b.X1 > r.X1 || b.Y1 > r.Y1 {
				t.Fatalf("clipped ring %v leaves %v", clipped, r)
			}
		}
		for k := 0; k < 200; k++ {
			px, py := rng.Float64()*180-40, rng.Float64()*180-40
			if distToRing(ring, px, py) < 1e-3 ||
				math.Abs(px-float64(r.X0)) < 1e-3 || math.Abs(px-float64(r.X1)) < 1e-3 ||
				math.Abs(py-float64(r.Y0)) < 1e-3 || math.Abs(py-float64(r.Y1)) < 1e-3 {
				continue
			}
			inRect := px > float64(r.X0) && px < float64(r.X1) && py > float64(r.Y0) && py < float64(r.Y1)
			want := inRect && evenOdd(ring, px, py)
			if got := len(clipped) > 0 && evenOdd(clipped, px, py); got != want {
				t.Fatalf("ring %v rect %v point (%v,%v): clipped %v, want %v; clipped ring %v", ring, r, px, py, got, want, clipped)
			}
			checked++
		}
	}
	if checked < 100000 {
		t.Fatalf("only %d points checked", checked)
	}
}

func TestClipRectCases(t *testing.T) {
	r := Rect{0, 0, 10, 10}
	cases := []struct {
		name string
		ring []float32
		want []float32
	}{
		{"inside unchanged", []float32{1, 1, 5, 1, 5, 5}, []float32{1, 1, 5, 1, 5, 5}},
		{"outside dropped", []float32{11, 11, 15, 11, 15, 15}, nil},
		{"touching a corner dropped", []float32{10, 10, 15, 10, 15, 15}, nil},
		{"touching an edge dropped", []float32{10, 2, 15, 2, 15, 8, 10, 8}, nil},
		{"covering becomes the rect", []float32{-5, -5, 15, -5, 15, 15, -5, 15}, []float32{0, 0, 10, 0, 10, 10, 0, 10}},
		{"half cut", []float32{5, 2, 15, 2, 15, 8, 5, 8}, []float32{5, 2, 10, 2, 10, 8, 5, 8}},
		{"duplicates merged", []float32{1, 1, 1, 1, 5, 1, 5, 5, 1, 1}, []float32{1, 1, 5, 1, 5, 5}},
		{"two vertices dropped", []float32{1, 1, 5, 5}, nil},
		{"empty", nil, nil},
	}
	for _, tc := range cases {
		got := ClipRect(nil, tc.ring, r)
		if !sameCycle(got, tc.want) {
			t.Errorf("%s: got %v, want %v (up to rotation)", tc.name, got, tc.want)
		}
	}
	if got := ClipRect(nil, []float32{1, 1, 5, 1, 5, 5}, Rect{1, 1, 0, 0}); got != nil {
		t.Errorf("empty rect: %v", got)
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, ring := range [][]float32{{nan, 1, 5, nan, 5, 5}, {inf, 1, -inf, 5, 5, inf}, {nan, nan, nan, nan, nan, nan}} {
		_ = ClipRect(nil, ring, r) // must not panic or loop
		_, _ = ClipBounds([][]float32{ring}, r)
	}
}

// sameCycle compares rings up to the starting vertex.
func sameCycle(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	for s := 0; s < len(a); s += 2 {
		ok := true
		for i := range a {
			if a[(i+s)%len(a)] != b[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestClipBoundsMatchesClipRect(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	var buf []float32
	for i := 0; i < 2000; i++ {
		rings := make([][]float32, 1+rng.IntN(4))
		for k := range rings {
			n := rng.IntN(12)
			rings[k] = make([]float32, 2*n)
			for j := range rings[k] {
				rings[k][j] = float32(rng.Float64()*140 - 20)
			}
		}
		r := Rect{float32(rng.IntN(50)), float32(rng.IntN(50)), float32(50 + rng.IntN(50)), float32(50 + rng.IntN(50))}
		var want Rect
		wantOK := false
		for _, ring := range rings {
			buf = ClipRect(buf[:0], ring, r)
			if b, ok := Bounds(buf); ok {
				if !wantOK {
					want = b
				} else {
					want = want.Union(b)
				}
				wantOK = true
			}
		}
		got, ok := ClipBounds(rings, r)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("rings %v rect %v: ClipBounds %v %v, want %v %v", rings, r, got, ok, want, wantOK)
		}
	}
}

func TestClipSteadyStateAllocatesNothing(t *testing.T) {
	ring := []float32{-5, 3, 8, -2, 14, 6, 9, 14, 2, 9, 5, 5}
	rings := [][]float32{ring, ring}
	r := Rect{0, 0, 10, 10}
	dst := make([]float32, 0, 64)
	if a := testing.AllocsPerRun(100, func() {
		dst = ClipRect(dst[:0], ring, r)
		_, _ = ClipBounds(rings, r)
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// Det is the area scale of an affine: a brute-force check on the unit
// square's image, and the sign of a mirror.
func TestDet(t *testing.T) {
	for _, m := range []Affine{Identity(), Scale(2, 3), Rotate(0.7).Mul(Scale(1.5, 0.5)), Scale(-1, 1), {1, 2, 5, 3, 4, -1}} {
		x0, y0 := m.Apply(0, 0)
		x1, y1 := m.Apply(1, 0)
		x2, y2 := m.Apply(0, 1)
		cross := (x1-x0)*(y2-y0) - (y1-y0)*(x2-x0) // signed area of the unit square's image
		if d := m.Det(); math.Abs(d-cross) > 1e-12 {
			t.Errorf("%v: Det %v, signed area of the unit square's image %v", m, d, cross)
		}
	}
	if Scale(-1, 1).Det() >= 0 {
		t.Error("a mirror has a non-negative determinant")
	}
}
