package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// matmul queues row-major GEMMs on a device's stream; Device.Matmul
// returns the cuBLAS one.
type matmul interface {
	Gemm(g backend.Gemm, a, b, c devptr) error
}

type blasMatmul struct {
	d  *device
	bl *blas
}

func (m blasMatmul) Gemm(g backend.Gemm, a, b, c devptr) error { return m.d.Gemm(m.bl, g, a, b, c) }

// matmul returns GEMMs through the cuBLAS handle bl.
func (d *device) Matmul(bl *blas) matmul { return blasMatmul{d, bl} }

// NS5 coefficients, steps and epsilon of trainer/optim's Newton–Schulz
// (the reference's zeropower_via_newtonschulz5).
const (
	nsA, nsB, nsC = 3.4445, -4.7750, 2.0315
	nsSteps       = 5
	nsEps         = 1e-7
)

// NewtonSchulzBytes is the workspace NewtonSchulz needs for count
// rows×cols matrices.
func (k *kernelSet) NewtonSchulzBytes(rows, cols, count int) int {
	r := min(rows, cols)
	return 4 * count * (2*rows*cols + 2*r*r)
}

// NewtonSchulz writes into out MuSGD's float32 orthogonalisation of each
// of count rows×cols matrices of g (row-major, back to back; out alike):
// X = g/(‖g‖_F + 1e-7), transposed when rows > cols, then five iterations
// X ← aX + (bA + cA²)X with A = XXᵀ, as trainer/optim does on the CPU for
// one matrix. The batch takes the launches of one matrix: one
// normalisation (BatchNormalize), strided-batched products on mm (cuBLAS)
// and element-wise steps over the whole batch; nothing returns to the
// host. ws must hold NewtonSchulzBytes(rows, cols, count) bytes.
func (k *kernelSet) NewtonSchulz(mm matmul, out, g devptr, rows, cols, count int, ws devptr) error {
	if rows <= 0 || cols <= 0 || count <= 0 {
		return fmt.Errorf("cuda: newton-schulz of %d %dx%d matrices", count, rows, cols)
	}
	n := rows * cols
	r, c := rows, cols
	tr := rows > cols
	if tr {
		r, c = cols, rows
	}
	x, t := ws, ws.Add(4*count*n)
	a := t.Add(4 * count * n)
	b := a.Add(4 * count * r * r)
	if tr {
		if err := k.BatchNormalize(g, t, nsEps, n, count); err != nil {
			return err
		}
		// x_k (cols×rows) is t_kᵀ: x[k][j][i] = t[k·n + i·cols + j].
		if err := k.Gather([]int{count, cols, rows}, []int{n, 1, cols}, t, x); err != nil {
			return err
		}
	} else if err := k.BatchNormalize(g, x, nsEps, n, count); err != nil {
		return err
	}
	gemm := func(g backend.Gemm, sa, sb, sc int, p, q, o devptr) error {
		g.Batch, g.StrideA, g.StrideB, g.StrideC = count, sa, sb, sc
		return mm.Gemm(g, p, q, o)
	}
	for range nsSteps {
		if err := gemm(backend.Gemm{TransB: true, M: r, N: r, K: c, Alpha: 1}, n, n, r*r, x, x, a); err != nil { // A = XXᵀ
			return err
		}
		if err := gemm(backend.Gemm{TransB: true, M: r, N: r, K: r, Alpha: 1}, r*r, r*r, r*r, a, a, b); err != nil { // A·Aᵀ = A²
			return err
		}
		if err := k.Axpby(a, b, nsC, nsB, count*r*r); err != nil { // B = bA + cA²
			return err
		}
		if err := gemm(backend.Gemm{M: r, N: c, K: r, Alpha: 1}, r*r, n, n, b, x, t); err != nil { // T = BX
			return err
		}
		if err := k.Axpby(t, x, nsA, 1, count*n); err != nil { // X = aX + T
			return err
		}
	}
	if tr {
		return k.Gather([]int{count, rows, cols}, []int{n, 1, rows}, x, out)
	}
	return k.Gather([]int{count * n}, []int{1}, x, out)
}
