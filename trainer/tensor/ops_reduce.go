package tensor

import (
	"fmt"
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Softmax normalises exp(x) along axis.
func (tp *Tape) Softmax(x *Tensor, axis int) *Tensor {
	axis = x.axis(axis)
	outer, inner := outerInner(x.Shape, axis)
	n := x.Shape[axis]
	be := tp.on(x)
	y := outputUninit(be, x.Shape...)
	be.Softmax(outer, n, inner, x.data, y.data)
	if tp.wants(x) {
		tp.push(func() { be.SoftmaxBackward(outer, n, inner, y.data, y.grad, x.GradBuffer()) }, y)
	}
	return y
}

// Sum returns the sum of all elements as a 0-d tensor (accumulated in
// float64).
func (tp *Tape) Sum(x *Tensor) *Tensor {
	be := tp.on(x)
	y := output(be, []int{}...)
	be.ChannelSum(1, 1, x.Numel(), x.data, y.data)
	if tp.wants(x) {
		tp.push(func() {
			gx := x.GradBuffer()
			be.Copy(backend.Strided{Shape: []int{gx.Len}, Src: []int{0}, Dst: []int{1}, Accumulate: true}, y.grad, gx)
		}, y)
	}
	return y
}

// Mean returns the mean of all elements as a 0-d tensor.
func (tp *Tape) Mean(x *Tensor) *Tensor {
	if x.Numel() == 0 {
		panic(fmt.Sprintf("tensor.Mean: empty tensor %s", x.desc()))
	}
	return tp.Scale(tp.Sum(x), 1/float32(x.Numel()))
}

// SumAxis sums along axis; keepDim keeps it as size 1.
func (tp *Tape) SumAxis(x *Tensor, axis int, keepDim bool) *Tensor {
	axis = x.axis(axis)
	outer, inner := outerInner(x.Shape, axis)
	n := x.Shape[axis]
	shape := slices.Clone(x.Shape)
	if keepDim {
		shape[axis] = 1
	} else {
		shape = slices.Delete(shape, axis, axis+1)
	}
	// y[o, j] += x[o, i, j]: a zero destination stride on the summed axis.
	walk := []int{outer, n, inner}
	be := tp.on(x)
	y := output(be, shape...)
	be.Copy(backend.Strided{Shape: walk, Src: []int{n * inner, inner, 1}, Dst: []int{inner, 0, 1}, Accumulate: true}, x.data, y.data)
	if tp.wants(x) {
		tp.push(func() {
			be.Copy(backend.Strided{Shape: walk, Src: []int{inner, 0, 1}, Dst: []int{n * inner, inner, 1}, Accumulate: true}, y.grad, x.GradBuffer())
		}, y)
	}
	return y
}

// MeanAxis averages along axis; keepDim keeps it as size 1.
func (tp *Tape) MeanAxis(x *Tensor, axis int, keepDim bool) *Tensor {
	return tp.Scale(tp.SumAxis(x, axis, keepDim), 1/float32(x.Dim(axis)))
}

// MatMul multiplies the last two axes: a [..., M, K] · b [..., K, N] →
// [..., M, N]. The leading (batch) axes of a and b must be equal, or b may
// be 2-d and is then shared by every batch entry.
func (tp *Tape) MatMul(a, b *Tensor) *Tensor { return tp.MatMulT(a, b, false, false) }

// MatMulT is MatMul with either operand's last two axes transposed first:
// transA reads a as [..., K, M], transB reads b as [..., N, K]. It avoids
// the copy a Transpose would make.
func (tp *Tape) MatMulT(a, b *Tensor, transA, transB bool) *Tensor {
	if a.Dims() < 2 || b.Dims() < 2 {
		panic(fmt.Sprintf("tensor.MatMul: operands %s and %s need 2+ axes", a.desc(), b.desc()))
	}
	ar, ac := a.Shape[a.Dims()-2], a.Shape[a.Dims()-1]
	br, bc := b.Shape[b.Dims()-2], b.Shape[b.Dims()-1]
	m, k := ar, ac
	if transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if transB {
		k2, n = bc, br
	}
	batchA := a.Shape[:a.Dims()-2]
	batchB := b.Shape[:b.Dims()-2]
	shared := len(batchB) == 0
	if k != k2 || (!shared && !slices.Equal(batchA, batchB)) {
		panic(fmt.Sprintf("tensor.MatMul: %s (trans %v) and %s (trans %v) do not multiply", a.desc(), transA, b.desc(), transB))
	}
	batch := numel(batchA)
	strideB := br * bc
	if shared {
		strideB = 0
	}
	shape := append(slices.Clone(batchA), m, n)
	be := tp.on(a)
	y := outputUninit(be, shape...)
	be.Sgemm(backend.Gemm{TransA: transA, TransB: transB, M: m, N: n, K: k, Alpha: 1,
		Batch: batch, StrideA: m * k, StrideB: strideB, StrideC: m * n}, a.data, b.data, y.data)
	if tp.wants(a, b) {
		tp.push(func() {
			gy := y.grad
			if needs(a) {
				// dA = dY·op(B)^T, stored in A's layout.
				ga := a.GradBuffer()
				if !transA {
					be.Sgemm(backend.Gemm{TransB: !transB, M: m, N: k, K: n, Alpha: 1, Beta: 1,
						Batch: batch, StrideA: m * n, StrideB: strideB, StrideC: m * k}, gy, b.data, ga)
				} else { // A^T stored: dA^T = op(B)·dY^T
					be.Sgemm(backend.Gemm{TransA: transB, TransB: true, M: k, N: m, K: n, Alpha: 1, Beta: 1,
						Batch: batch, StrideA: strideB, StrideB: m * n, StrideC: m * k}, b.data, gy, ga)
				}
			}
			if needs(b) {
				gb := b.GradBuffer()
				bs := batch
				sb := strideB
				if shared {
					bs, sb = 1, 0
				}
				for bi := 0; bi < batch; bi += bs {
					cnt := bs
					if shared {
						cnt = 1
					}
					ao, yo := bi*m*k, bi*m*n
					if !transB { // dB = op(A)^T·dY
						be.Sgemm(backend.Gemm{TransA: !transA, M: k, N: n, K: m, Alpha: 1, Beta: 1,
							Batch: cnt, StrideA: m * k, StrideB: m * n, StrideC: sb}, a.data.From(ao), gy.From(yo), gb.From(bi*sb))
					} else { // B^T stored: dB^T = dY^T·op(A)
						be.Sgemm(backend.Gemm{TransA: true, TransB: transA, M: n, N: k, K: m, Alpha: 1, Beta: 1,
							Batch: cnt, StrideA: m * n, StrideB: m * k, StrideC: sb}, gy.From(yo), a.data.From(ao), gb.From(bi*sb))
					}
				}
			}
		}, y)
	}
	return y
}
