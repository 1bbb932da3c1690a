package optim

import (
	"math"

	"github.com/segpipe/segpipe/internal/parfor"
)

// NS5 coefficients and step count of the reference's
// zeropower_via_newtonschulz5.
const (
	nsA, nsB, nsC = 3.4445, -4.7750, 2.0315
	nsSteps       = 5
	nsEps         = 1e-7
)

// newtonSchulz holds the scratch matrices of one orthogonalisation.
type newtonSchulz struct {
	x, a, b, t []float32
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// orthogonalise writes into out (rows×cols) the float32 NS5 of g
// (rows×cols, row-major): X = g/(‖g‖_F + 1e-7), transposed when rows >
// cols, then five iterations X ← aX + (bA + cA²)X with A = XXᵀ.
func (ns *newtonSchulz) orthogonalise(out, g []float32, rows, cols int) {
	norm := 0.0
	for _, v := range g {
		norm += float64(v) * float64(v)
	}
	inv := float32(1 / (math.Sqrt(norm) + nsEps))
	r, c := rows, cols
	tr := rows > cols
	if tr {
		r, c = cols, rows
	}
	ns.x = grow(ns.x, r*c)
	ns.t = grow(ns.t, r*c)
	ns.a = grow(ns.a, r*r)
	ns.b = grow(ns.b, r*r)
	x := ns.x
	if tr {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				x[j*rows+i] = g[i*cols+j] * inv
			}
		}
	} else {
		for i, v := range g {
			x[i] = v * inv
		}
	}
	for step := 0; step < nsSteps; step++ {
		gramRows(ns.a, x, r, c) // A = X Xᵀ
		gramRows(ns.b, ns.a, r, r)
		for i := range ns.b { // B = bA + cA² (A symmetric: A² = A Aᵀ)
			ns.b[i] = nsB*ns.a[i] + nsC*ns.b[i]
		}
		matMul(ns.t, ns.b, x, r, r, c) // T = B X
		for i := range x {
			x[i] = nsA*x[i] + ns.t[i]
		}
	}
	if tr {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				out[i*cols+j] = x[j*rows+i]
			}
		}
	} else {
		copy(out, x)
	}
}

// parallelRows runs f over [0, n) split into contiguous blocks, one per
// available CPU, when the loop touches enough elements to pay for it.
func parallelRows(n int, work int, f func(lo, hi int)) {
	parfor.Blocks(parfor.Workers(work, parfor.MinWork), n, f)
}

// gramRows writes out = X Xᵀ for X (r×c); rows are contiguous, so each
// entry is a dot product of two rows.
func gramRows(out, x []float32, r, c int) {
	parallelRows(r, r*r*c, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi := x[i*c : (i+1)*c]
			for j := 0; j <= i; j++ {
				d := dot(xi, x[j*c:(j+1)*c])
				out[i*r+j] = d
				out[j*r+i] = d
			}
		}
	})
}

// matMul writes out = A B for A (m×k), B (k×n).
func matMul(out, a, b []float32, m, k, n int) {
	parallelRows(m, m*k*n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			oi := out[i*n : (i+1)*n]
			clear(oi)
			for p := 0; p < k; p++ {
				axpy(oi, b[p*n:(p+1)*n], a[i*k+p])
			}
		}
	})
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
