package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// colMajorGemm is one cublasSgemmStridedBatched call: column-major
// C = op(A)·op(B) with op(A) m×k, leading dimensions in elements.
type colMajorGemm struct {
	transA, transB          bool
	m, n, k                 int
	a, b                    int // 0 for the row-major A, 1 for B: which operand plays cuBLAS's A
	lda, ldb, ldc           int
	strideA, strideB, strid int
	batch                   int
}

// toColMajor maps a row-major product (backend.Gemm, the CPU backend's
// definition) onto cuBLAS's column-major one. A
// row-major matrix read column-major is its transpose, so row-major
// C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands
// (B first), keep each one's transposition flag, and swap M and N. The
// leading dimension of each stored matrix is its row-major row length.
func toColMajor(g backend.Gemm) (colMajorGemm, error) {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return colMajorGemm{}, fmt.Errorf("cuda: gemm with negative size %dx%dx%d", g.M, g.N, g.K)
	}
	batch := max(g.Batch, 1)
	if batch > 1 && g.StrideC == 0 {
		return colMajorGemm{}, fmt.Errorf("cuda: batched gemm with zero StrideC")
	}
	lda := g.K // A stored M×K
	if g.TransA {
		lda = g.M // stored K×M
	}
	ldb := g.N // B stored K×N
	if g.TransB {
		ldb = g.K // stored N×K
	}
	return colMajorGemm{
		transA: g.TransB, transB: g.TransA,
		m: g.N, n: g.M, k: g.K,
		a: 1, b: 0,
		lda: max(ldb, 1), ldb: max(lda, 1), ldc: max(g.N, 1),
		strideA: g.StrideB, strideB: g.StrideA, strid: g.StrideC,
		batch: batch,
	}, nil
}
