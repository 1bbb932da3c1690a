package tensor

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// unary runs a backend unary function with its backward.
func (tp *Tape) unary(f backend.Unary, x *Tensor) *Tensor {
	be := tp.on(x)
	y := outputUninit(be, x.Shape...)
	be.Unary(f, x.data, y.data)
	if tp.wants(x) {
		tp.push(func() {
			be.UnaryBackward(f, x.data, y.data, y.grad, x.GradBuffer())
		}, y)
	}
	return y
}

// SiLU returns x·sigmoid(x).
func (tp *Tape) SiLU(x *Tensor) *Tensor { return tp.unary(backend.SiLU, x) }

// Sigmoid returns 1/(1+exp(−x)).
func (tp *Tape) Sigmoid(x *Tensor) *Tensor { return tp.unary(backend.Sigmoid, x) }

// ReLU returns max(x, 0); its gradient at 0 is 0.
func (tp *Tape) ReLU(x *Tensor) *Tensor { return tp.unary(backend.ReLU, x) }

// Exp returns e^x.
func (tp *Tape) Exp(x *Tensor) *Tensor { return tp.unary(backend.Exp, x) }

// Log returns the natural logarithm.
func (tp *Tape) Log(x *Tensor) *Tensor { return tp.unary(backend.Log, x) }

// Abs returns |x|; its gradient at 0 is 0.
func (tp *Tape) Abs(x *Tensor) *Tensor { return tp.unary(backend.Abs, x) }

// Neg returns −x.
func (tp *Tape) Neg(x *Tensor) *Tensor { return tp.unary(backend.Neg, x) }

// Sqrt returns √x.
func (tp *Tape) Sqrt(x *Tensor) *Tensor { return tp.unary(backend.Sqrt, x) }

// Square returns x².
func (tp *Tape) Square(x *Tensor) *Tensor { return tp.unary(backend.Square, x) }

// Atan returns arctan(x) (CIoU's aspect-ratio term needs it).
func (tp *Tape) Atan(x *Tensor) *Tensor { return tp.unary(backend.Atan, x) }

// Tanh returns tanh(x).
func (tp *Tape) Tanh(x *Tensor) *Tensor { return tp.unary(backend.Tanh, x) }

// Scale returns s·x.
func (tp *Tape) Scale(x *Tensor, s float32) *Tensor {
	be := tp.on(x)
	y := outputUninit(be, x.Shape...)
	be.Axpby(s, x.data, 0, y.data)
	if tp.wants(x) {
		tp.push(func() { be.Axpby(s, y.grad, 1, x.GradBuffer()) }, y)
	}
	return y
}

// Binary ops broadcast numpy-style: shapes align from the right and a
// dimension of size 1 (or a missing one) stretches to match. Gradients of a
// broadcast operand are summed over the stretched dimensions.

// Add returns a + b with broadcasting.
func (tp *Tape) Add(a, b *Tensor) *Tensor { return tp.binary(backend.Add, a, b) }

// Sub returns a − b with broadcasting.
func (tp *Tape) Sub(a, b *Tensor) *Tensor { return tp.binary(backend.Sub, a, b) }

// Mul returns a·b elementwise with broadcasting.
func (tp *Tape) Mul(a, b *Tensor) *Tensor { return tp.binary(backend.Mul, a, b) }

// Div returns a/b elementwise with broadcasting.
func (tp *Tape) Div(a, b *Tensor) *Tensor { return tp.binary(backend.Div, a, b) }

// Maximum returns max(a, b) elementwise with broadcasting; on ties the
// gradient is split equally, as in PyTorch.
func (tp *Tape) Maximum(a, b *Tensor) *Tensor { return tp.binary(backend.Maximum, a, b) }

// Minimum returns min(a, b) elementwise with broadcasting; on ties the
// gradient is split equally, as in PyTorch.
func (tp *Tape) Minimum(a, b *Tensor) *Tensor { return tp.binary(backend.Minimum, a, b) }

func (tp *Tape) binary(f backend.Binary, a, b *Tensor) *Tensor {
	out, sa, sb := broadcastShapes(a, b)
	s := backend.Broadcast{Shape: out, StrideA: sa, StrideB: sb}
	be := tp.on(a)
	y := outputUninit(be, out...)
	be.Binary(f, s, a.data, b.data, y.data)
	if tp.wants(a, b) {
		tp.push(func() {
			var ga, gb backend.Buffer
			if needs(a) {
				ga = a.GradBuffer()
			}
			if needs(b) {
				gb = b.GradBuffer()
			}
			be.BinaryBackward(f, s, a.data, b.data, y.grad, ga, gb)
		}, y)
	}
	return y
}

// broadcastShapes returns the broadcast output shape and, per output axis,
// the element strides of a and b (0 on stretched axes).
func broadcastShapes(a, b *Tensor) (out, sa, sb []int) {
	n := max(len(a.Shape), len(b.Shape))
	out = make([]int, n)
	sa = make([]int, n)
	sb = make([]int, n)
	stA, stB := 1, 1
	for i := n - 1; i >= 0; i-- {
		da, db := 1, 1
		if j := i - (n - len(a.Shape)); j >= 0 {
			da = a.Shape[j]
		}
		if j := i - (n - len(b.Shape)); j >= 0 {
			db = b.Shape[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			panic(fmt.Sprintf("tensor: cannot broadcast %s with %s", a.desc(), b.desc()))
		}
		if da != 1 || out[i] == 1 {
			sa[i] = stA
		}
		if db != 1 || out[i] == 1 {
			sb[i] = stB
		}
		stA *= da
		stB *= db
	}
	return out, sa, sb
}
