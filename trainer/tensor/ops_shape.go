package tensor

import (
	"fmt"
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Reshape returns a view of x with a new shape of the same element count;
// one dimension may be −1 and is inferred. The data is shared (not
// copied); the gradient is not.
func (tp *Tape) Reshape(x *Tensor, shape ...int) *Tensor {
	shape = slices.Clone(shape)
	infer, known := -1, 1
	for i, d := range shape {
		if d == -1 {
			if infer >= 0 {
				panic(fmt.Sprintf("tensor.Reshape: two -1 dimensions in %v", shape))
			}
			infer = i
			continue
		}
		known *= d
	}
	if infer >= 0 && known > 0 {
		shape[infer] = x.Numel() / known
	}
	if numel(shape) != x.Numel() {
		panic(fmt.Sprintf("tensor.Reshape: cannot view %s as %v", x.desc(), shape))
	}
	y := &Tensor{Shape: shape, be: x.be, data: x.data}
	if tp.wants(x) {
		be := tp.on(x)
		tp.push(func() {
			gx, write := x.gradForWrite(true)
			beta := float32(1)
			if write { // the first writer copies (beta 0 reads nothing)
				beta = 0
			}
			be.Axpby(1, y.grad, beta, gx)
		}, y)
	}
	return y
}

// Permute returns x with its axes reordered: output axis i is input axis
// perm[i]. The result is a contiguous copy.
func (tp *Tape) Permute(x *Tensor, perm ...int) *Tensor {
	nd := x.Dims()
	if len(perm) != nd {
		panic(fmt.Sprintf("tensor.Permute: permutation %v for %s", perm, x.desc()))
	}
	seen := make([]bool, nd)
	for _, p := range perm {
		if p < 0 || p >= nd || seen[p] {
			panic(fmt.Sprintf("tensor.Permute: %v is not a permutation of %d axes", perm, nd))
		}
		seen[p] = true
	}
	inStr := contiguousStrides(x.Shape)
	shape := make([]int, nd)
	str := make([]int, nd) // input stride of each output axis
	for i, p := range perm {
		shape[i] = x.Shape[p]
		str[i] = inStr[p]
	}
	be := tp.on(x)
	y := outputUninit(be, shape...)
	dense := contiguousStrides(shape)
	be.Copy(backend.Strided{Shape: shape, Src: str, Dst: dense}, x.data, y.data)
	if tp.wants(x) {
		tp.push(func() {
			be.Copy(backend.Strided{Shape: shape, Src: dense, Dst: str, Accumulate: true}, y.grad, x.GradBuffer())
		}, y)
	}
	return y
}

// Transpose swaps axes a and b (negative axes count from the end).
func (tp *Tape) Transpose(x *Tensor, a, b int) *Tensor {
	perm := make([]int, x.Dims())
	for i := range perm {
		perm[i] = i
	}
	a, b = x.axis(a), x.axis(b)
	perm[a], perm[b] = perm[b], perm[a]
	return tp.Permute(x, perm...)
}

func contiguousStrides(shape []int) []int {
	s := make([]int, len(shape))
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = st
		st *= shape[i]
	}
	return s
}

// outerInner splits shape around axis: outer = product before it, inner =
// product after it.
func outerInner(shape []int, axis int) (outer, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		if i < axis {
			outer *= d
		} else if i > axis {
			inner *= d
		}
	}
	return outer, inner
}

// Concat joins tensors along axis; all other dimensions must agree.
func (tp *Tape) Concat(axis int, xs ...*Tensor) *Tensor {
	if len(xs) == 0 {
		panic("tensor.Concat: no inputs")
	}
	axis = xs[0].axis(axis)
	shape := slices.Clone(xs[0].Shape)
	shape[axis] = 0
	for _, x := range xs {
		if x.Dims() != len(shape) {
			panic(fmt.Sprintf("tensor.Concat: %s vs %s", xs[0].desc(), x.desc()))
		}
		for i, d := range x.Shape {
			if i != axis && d != shape[i] {
				panic(fmt.Sprintf("tensor.Concat: %s vs %s along axis %d", xs[0].desc(), x.desc(), axis))
			}
		}
		shape[axis] += x.Shape[axis]
	}
	outer, inner := outerInner(shape, axis)
	be := tp.on(xs[0])
	y := outputUninit(be, shape...)
	rowY := shape[axis] * inner
	off := 0
	for _, x := range xs {
		rowX := x.Shape[axis] * inner
		be.Copy(rows(outer, rowX, rowX, rowY, false), x.data, y.data.From(off))
		off += rowX
	}
	if tp.wants(xs...) {
		xs = slices.Clone(xs)
		tp.push(func() {
			off := 0
			for _, x := range xs {
				rowX := x.Shape[axis] * inner
				if needs(x) {
					// The first writer copies instead of adding to zeros.
					gx, write := x.gradForWrite(true)
					be.Copy(rows(outer, rowX, rowY, rowX, !write), y.grad.From(off), gx)
				}
				off += rowX
			}
		}, y)
	}
	return y
}

// rows is the walk over outer rows of n elements between buffers whose
// rows start every src and dst elements.
func rows(outer, n, src, dst int, acc bool) backend.Strided {
	return backend.Strided{Shape: []int{outer, n}, Src: []int{src, 1}, Dst: []int{dst, 1}, Accumulate: acc}
}

// Split cuts x along axis into consecutive pieces of the given sizes
// (which must sum to the axis length). Where every axis before axis has
// length 1 (a split of the outermost axis, or of a single image's
// channels) each piece is contiguous in x and is a view of x's data, as a
// Reshape is; otherwise each piece is a copy.
func (tp *Tape) Split(x *Tensor, axis int, sizes ...int) []*Tensor {
	axis = x.axis(axis)
	total := 0
	for _, s := range sizes {
		if s < 0 {
			panic(fmt.Sprintf("tensor.Split: negative size in %v", sizes))
		}
		total += s
	}
	if total != x.Shape[axis] {
		panic(fmt.Sprintf("tensor.Split: sizes %v do not sum to axis %d of %s", sizes, axis, x.desc()))
	}
	outer, inner := outerInner(x.Shape, axis)
	rowX := x.Shape[axis] * inner
	be := tp.on(x)
	outs := make([]*Tensor, len(sizes))
	off := 0
	for k, s := range sizes {
		shape := slices.Clone(x.Shape)
		shape[axis] = s
		rowY := s * inner
		var y *Tensor
		if outer == 1 {
			y = &Tensor{Shape: shape, be: x.be, data: x.data.Slice(off, off+rowY)}
		} else {
			y = outputUninit(be, shape...)
			be.Copy(rows(outer, rowY, rowX, rowY, false), x.data.From(off), y.data)
		}
		outs[k] = y
		off += rowY
	}
	if tp.wants(x) {
		ys := slices.Clone(outs)
		tp.push(func() {
			// Where every piece has a gradient they cover x's: the first
			// writer copies them instead of adding to zeros.
			every := true
			for _, y := range ys {
				every = every && y.grad.Present()
			}
			gx, write := x.gradForWrite(every)
			off := 0
			for _, y := range ys {
				rowY := y.Shape[axis] * inner
				if y.grad.Present() {
					be.Copy(rows(outer, rowY, rowY, rowX, !write), y.grad, gx.From(off))
				}
				off += rowY
			}
		}, ys...)
	}
	return outs
}

// Chunk splits x along axis into n equal pieces (the axis length must be
// divisible by n).
func (tp *Tape) Chunk(x *Tensor, n, axis int) []*Tensor {
	d := x.Dim(axis)
	if n <= 0 || d%n != 0 {
		panic(fmt.Sprintf("tensor.Chunk: axis %d of %s is not divisible into %d", axis, x.desc(), n))
	}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = d / n
	}
	return tp.Split(x, axis, sizes...)
}

// Slice returns x[..., start:end, ...] along axis (a view where Split
// makes one, else a copy).
func (tp *Tape) Slice(x *Tensor, axis, start, end int) *Tensor {
	d := x.Dim(axis)
	if start < 0 || end > d || start > end {
		panic(fmt.Sprintf("tensor.Slice: [%d:%d] out of range for axis %d of %s", start, end, axis, x.desc()))
	}
	parts := tp.Split(x, axis, start, end-start, d-end)
	return parts[1]
}
