package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Matmul queues row-major GEMMs on a device's stream; Device.Matmul
// returns the cuBLAS one.
type Matmul interface {
	Gemm(g backend.Gemm, a, b, c Ptr) error
}

type blasMatmul struct {
	d  *Device
	bl *Blas
}

func (m blasMatmul) Gemm(g backend.Gemm, a, b, c Ptr) error { return m.d.Gemm(m.bl, g, a, b, c) }

// Matmul returns GEMMs through the cuBLAS handle bl.
func (d *Device) Matmul(bl *Blas) Matmul { return blasMatmul{d, bl} }

// NS5 coefficients, steps and epsilon of trainer/optim's Newton–Schulz
// (the reference's zeropower_via_newtonschulz5).
const (
	nsA, nsB, nsC = 3.4445, -4.7750, 2.0315
	nsSteps       = 5
	nsEps         = 1e-7
)

// NewtonSchulzBytes is the workspace NewtonSchulz needs for a rows×cols
// matrix.
func (k *Kernels) NewtonSchulzBytes(rows, cols int) int {
	r := min(rows, cols)
	return 4*(2*rows*cols+2*r*r) + 8*k.ReduceScratch(rows*cols) + 8
}

// NewtonSchulz writes into out (rows×cols, row-major) MuSGD's float32
// orthogonalisation of g: X = g/(‖g‖_F + 1e-7), transposed when rows >
// cols, then five iterations X ← aX + (bA + cA²)X with A = XXᵀ, as
// trainer/optim does on the CPU. The products run on mm (cuBLAS), the
// rest in the kernels; nothing returns to the host. ws must hold
// NewtonSchulzBytes(rows, cols) bytes.
func (k *Kernels) NewtonSchulz(mm Matmul, out, g Ptr, rows, cols int, ws Ptr) error {
	if rows <= 0 || cols <= 0 {
		return fmt.Errorf("cuda: newton-schulz of a %dx%d matrix", rows, cols)
	}
	n := rows * cols
	r, c := rows, cols
	tr := rows > cols
	if tr {
		r, c = cols, rows
	}
	x, t := ws, ws.Add(4*n)
	a := ws.Add(8 * n)
	b := a.Add(4 * r * r)
	partial := b.Add(4 * r * r)
	norm := partial.Add(8 * k.ReduceScratch(n))
	if err := k.GlobalNorm([]Ptr{g}, []int{n}, partial, norm); err != nil {
		return err
	}
	if tr {
		if err := k.ScaleInvNorm(g, t, norm, nsEps, n); err != nil {
			return err
		}
		// x (cols×rows) is tᵀ: x[j][i] = t[i·cols + j].
		if err := k.Gather([]int{cols, rows}, []int{1, cols}, t, x); err != nil {
			return err
		}
	} else if err := k.ScaleInvNorm(g, x, norm, nsEps, n); err != nil {
		return err
	}
	for range nsSteps {
		if err := mm.Gemm(backend.Gemm{TransB: true, M: r, N: r, K: c, Alpha: 1}, x, x, a); err != nil { // A = XXᵀ
			return err
		}
		if err := mm.Gemm(backend.Gemm{TransB: true, M: r, N: r, K: r, Alpha: 1}, a, a, b); err != nil { // A·Aᵀ = A²
			return err
		}
		if err := k.Axpby(a, b, nsC, nsB, r*r); err != nil { // B = bA + cA²
			return err
		}
		if err := mm.Gemm(backend.Gemm{M: r, N: c, K: r, Alpha: 1}, b, x, t); err != nil { // T = BX
			return err
		}
		if err := k.Axpby(t, x, nsA, 1, n); err != nil { // X = aX + T
			return err
		}
	}
	if tr {
		return k.Gather([]int{rows, cols}, []int{1, rows}, x, out)
	}
	return k.Gather([]int{n}, []int{1}, x, out)
}
