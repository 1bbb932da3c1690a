package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNormKernelsMatchPortableLoops checks the vector batch-norm helpers
// against their portable loops for every length up to a few vectors
// (head, body and tail splits) and one long run.
func TestNormKernelsMatchPortableLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }
	for _, n := range append([]int{0, 1, 7, 8, 9, 15, 16, 17, 31, 33}, 100003) {
		x, dy := randSlice(r, n), randSlice(r, n)
		for i := range x {
			x[i] = 100 + 3*x[i] // a large mean exercises the shift
		}
		k := 99.5
		s, ss := sumShift(x, k)
		ws, wss := sumShiftGo(x, k)
		if !near(s, ws, 1e-12) || !near(ss, wss, 1e-12) {
			t.Fatalf("n=%d sumShift (%v, %v), want (%v, %v)", n, s, ss, ws, wss)
		}
		a, b := sumDyDyx(dy, x, k)
		wa, wb := sumDyDyxGo(dy, x, k)
		if !near(a, wa, 1e-12) || !near(b, wb, 1e-12) {
			t.Fatalf("n=%d sumDyDyx (%v, %v), want (%v, %v)", n, a, b, wa, wb)
		}
		y, wy := make([]float32, n), make([]float32, n)
		affine(x, y, 0.37, -36.5)
		affineGo(x, wy, 0.37, -36.5)
		dx, wdx := make([]float32, n), make([]float32, n)
		for i := range dx {
			dx[i], wdx[i] = 0.25, 0.25
		}
		bnBack(dy, x, dx, 1.5, 0.01, 0.2, 100.2)
		bnBackGo(dy, x, wdx, 1.5, 0.01, 0.2, 100.2)
		for i := range y {
			// Fused and unfused multiply-add differ by rounding only: a few
			// ulps of the largest term, not of the (possibly cancelled) result.
			ty := 1e-6 * (math.Abs(float64(x[i])*0.37) + 36.5)
			td := 1e-6 * (0.25 + 1.5*math.Abs(float64(dy[i])-0.01) + 0.2*math.Abs(float64(x[i])-100.2))
			if math.Abs(float64(y[i]-wy[i])) > ty || math.Abs(float64(dx[i]-wdx[i])) > td {
				t.Fatalf("n=%d element %d: affine %v/%v, bnBack %v/%v", n, i, y[i], wy[i], dx[i], wdx[i])
			}
		}
	}
}

func TestVectorAxpyDotMatchPortableLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{0, 1, 15, 16, 17, 33, 80, 161} {
		x, y := randSlice(r, n), randSlice(r, n)
		y1, y2 := append([]float32(nil), y...), append([]float32(nil), y...)
		axpy(0.7, x, y1)
		axpyGo(0.7, x, y2)
		var s float64
		for i := range x {
			s += float64(x[i]) * float64(y[i])
			if math.Abs(float64(y1[i]-y2[i])) > 1e-6 {
				t.Fatalf("n=%d axpy[%d] = %v, want %v", n, i, y1[i], y2[i])
			}
		}
		if d := dot(x, y); math.Abs(float64(d)-s) > 1e-5*(1+float64(n)) {
			t.Fatalf("n=%d dot = %v, want %v", n, d, s)
		}
	}
}
