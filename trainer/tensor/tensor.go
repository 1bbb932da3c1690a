package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Tensor is a contiguous row-major float32 array.
//
// Data holds len = product(Shape) values. Grad, when non-nil, has the same
// length and receives gradients during Backward; it is allocated on first
// use. RequiresGrad marks tensors whose gradient is wanted: parameters set
// it, and ops set it on their outputs when recording on a Tape and any input
// requires grad. As in PyTorch, only leaves (tensors not produced by a
// recorded op: parameters, inputs) keep their Grad after Backward; the
// gradient buffers of intermediates are recycled as soon as the op that
// produced them has consumed them. A Tensor is not safe for concurrent
// mutation.
type Tensor struct {
	Shape        []int
	Data         []float32
	Grad         []float32
	RequiresGrad bool
	// Name labels parameters (state-dict key) and appears in panics.
	Name string

	fromOp bool // produced by a recorded op (not a leaf)
	owned  bool // Data was allocated by an op (not a view of other memory)
}

// New wraps data (not copied) as a tensor of the given shape. It panics
// when len(data) differs from the shape's element count.
func New(data []float32, shape ...int) *Tensor {
	if n := numel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.New: shape %v needs %d values, got %d", shape, n, len(data)))
	}
	return &Tensor{Shape: slices.Clone(shape), Data: data}
}

// Zeros returns a zero-filled tensor.
func Zeros(shape ...int) *Tensor {
	return &Tensor{Shape: slices.Clone(shape), Data: make([]float32, numel(shape))}
}

// Full returns a tensor filled with v.
func Full(v float32, shape ...int) *Tensor {
	t := Zeros(shape...)
	for i := range t.Data {
		t.Data[i] = v
	}
	return t
}

// Scalar returns a 0-d tensor holding v.
func Scalar(v float32) *Tensor { return &Tensor{Shape: []int{}, Data: []float32{v}} }

// Param returns a zero-filled tensor that requires grad, named name.
func Param(name string, shape ...int) *Tensor {
	t := Zeros(shape...)
	t.Name, t.RequiresGrad = name, true
	return t
}

// Rand returns a tensor of uniform values in [lo, hi) drawn from r.
func Rand(r *rand.Rand, lo, hi float32, shape ...int) *Tensor {
	t := Zeros(shape...)
	for i := range t.Data {
		t.Data[i] = lo + (hi-lo)*r.Float32()
	}
	return t
}

// Numel is the number of elements.
func (t *Tensor) Numel() int { return len(t.Data) }

// Dims is the number of axes.
func (t *Tensor) Dims() int { return len(t.Shape) }

// Dim returns the size of axis i; negative i counts from the end.
func (t *Tensor) Dim(i int) int { return t.Shape[t.axis(i)] }

// Item returns the single value of a one-element tensor.
func (t *Tensor) Item() float32 {
	if len(t.Data) != 1 {
		panic(fmt.Sprintf("tensor.Item: tensor %s has %d elements", t.desc(), len(t.Data)))
	}
	return t.Data[0]
}

// GradBuf returns Grad, allocating it zeroed on first use.
func (t *Tensor) GradBuf() []float32 {
	if t.Grad == nil {
		t.Grad = getZeroed(len(t.Data))
	}
	return t.Grad
}

// ZeroGrad sets the gradient to zero, keeping its buffer.
func (t *Tensor) ZeroGrad() {
	for i := range t.Grad {
		t.Grad[i] = 0
	}
}

// ZeroGrad zeroes the gradients of every tensor given.
func ZeroGrad(ts ...*Tensor) {
	for _, t := range ts {
		t.ZeroGrad()
	}
}

// Detach returns a tensor sharing t's data that requires no grad, so
// whatever is computed from it sends no gradient back to t.
func (t *Tensor) Detach() *Tensor {
	return &Tensor{Shape: slices.Clone(t.Shape), Data: t.Data, Name: t.Name}
}

// Clone returns a deep copy of data and shape, without grad.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data), Name: t.Name}
}

// SameShape reports whether a and b have identical shapes.
func SameShape(a, b *Tensor) bool { return slices.Equal(a.Shape, b.Shape) }

// String summarises the tensor (name, shape, a few values).
func (t *Tensor) String() string {
	n := min(len(t.Data), 6)
	return fmt.Sprintf("Tensor%s%v %v", nameTag(t.Name), t.Shape, t.Data[:n])
}

func nameTag(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func (t *Tensor) desc() string { return nameTag(t.Name) + fmt.Sprint(t.Shape) }

func (t *Tensor) axis(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	if i < 0 || i >= len(t.Shape) {
		panic(fmt.Sprintf("tensor: axis out of range for %s", t.desc()))
	}
	return i
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// AllClose reports whether every |a−b| ≤ atol + rtol·|b| (NaNs never match).
func AllClose(a, b []float32, rtol, atol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if !(d <= atol+rtol*math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}
