package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// naiveBinary evaluates a broadcast op (forward and accumulated gradient)
// one output element at a time from the stride definition.
func naiveBinary(f backend.Binary, s backend.Broadcast, a, b, dy, y, da, db []float32) {
	total := 1
	for _, d := range s.Shape {
		total *= d
	}
	idx := make([]int, len(s.Shape))
	for o := 0; o < total; o++ {
		rem := o
		for k := len(s.Shape) - 1; k >= 0; k-- {
			idx[k] = rem % s.Shape[k]
			rem /= s.Shape[k]
		}
		ia, ib := 0, 0
		for k := range idx {
			ia += idx[k] * s.StrideA[k]
			ib += idx[k] * s.StrideB[k]
		}
		x, z, g := a[ia], b[ib], dy[o]
		var v, dA, dB float32
		switch f {
		case backend.Add:
			v, dA, dB = x+z, g, g
		case backend.Sub:
			v, dA, dB = x-z, g, -g
		case backend.Mul:
			v, dA, dB = x*z, g*z, g*x
		case backend.Div:
			v, dA, dB = x/z, g/z, -g*x/(z*z)
		case backend.Maximum:
			v = max(x, z)
			switch {
			case x == z:
				dA, dB = g/2, g/2
			case x > z:
				dA = g
			default:
				dB = g
			}
		case backend.Minimum:
			v = min(x, z)
			switch {
			case x == z:
				dA, dB = g/2, g/2
			case x < z:
				dA = g
			default:
				dB = g
			}
		}
		y[o] = v
		da[ia] += dA
		db[ib] += dB
	}
}

// TestBinaryMatchesNaive covers same-shape, per-channel, outer-product and
// scalar broadcasts, every function, one and several workers, and the
// parallel split forced on small shapes.
func TestBinaryMatchesNaive(t *testing.T) {
	saved := minParallel
	defer func() { minParallel = saved }()
	r := rand.New(rand.NewPCG(6, 6))
	cases := []backend.Broadcast{
		{Shape: []int{2, 3, 4}, StrideA: []int{12, 4, 1}, StrideB: []int{12, 4, 1}},
		{Shape: []int{2, 3, 5}, StrideA: []int{15, 5, 1}, StrideB: []int{0, 1, 0}}, // per-channel b
		{Shape: []int{4, 6}, StrideA: []int{1, 0}, StrideB: []int{0, 1}},           // outer product
		{Shape: []int{3, 7}, StrideA: []int{7, 1}, StrideB: []int{0, 0}},           // scalar b
		{Shape: []int{2, 1, 9}, StrideA: []int{9, 9, 1}, StrideB: []int{0, 9, 1}},
	}
	for ci, s := range cases {
		na, nb := 1, 1
		for k, d := range s.Shape {
			if s.StrideA[k] != 0 {
				na = max(na, s.StrideA[k]*d)
			}
			if s.StrideB[k] != 0 {
				nb = max(nb, s.StrideB[k]*d)
			}
		}
		total := 1
		for _, d := range s.Shape {
			total *= d
		}
		for f := backend.Add; f <= backend.Minimum; f++ {
			for _, threshold := range []int{saved, 1} {
				for _, w := range []int{1, 3} {
					minParallel = threshold
					a, b, dy := randSlice(r, na), randSlice(r, nb), randSlice(r, total)
					if f == backend.Div {
						for i := range b {
							b[i] = 0.5 + float32(math.Abs(float64(b[i])))
						}
					}
					if f >= backend.Maximum { // include exact ties
						b[0] = a[0]
					}
					y, wy := make([]float32, total), make([]float32, total)
					da, db := make([]float32, na), make([]float32, nb)
					wda, wdb := make([]float32, na), make([]float32, nb)
					be := &Kernels{Workers: w}
					be.Binary(f, s, a, b, y)
					be.BinaryBackward(f, s, a, b, dy, da, db)
					naiveBinary(f, s, a, b, dy, wy, wda, wdb)
					name := fmt.Sprintf("case %d f %d workers %d threshold %d", ci, f, w, threshold)
					for _, c := range []struct {
						what      string
						got, want []float32
					}{{"y", y, wy}, {"da", da, wda}, {"db", db, wdb}} {
						for i := range c.got {
							if math.Abs(float64(c.got[i]-c.want[i])) > 1e-5*(1+math.Abs(float64(c.want[i]))) {
								t.Fatalf("%s: %s[%d] = %v, want %v", name, c.what, i, c.got[i], c.want[i])
							}
						}
					}
				}
			}
		}
	}
}
