package tensor

import (
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Op outputs and intermediate gradients are drawn from the backend's pooled
// Alloc and handed back with Free (RecycleOutputs, the gradient recycling
// in BackwardFrom), so a training loop mostly reuses the previous step's
// buffers instead of faulting in fresh memory.

// output returns a zeroed tensor on be for an op's result.
func output(be backend.Backend, shape ...int) *Tensor {
	t := outputUninit(be, shape...)
	be.Fill(t.data, 0)
	return t
}

// outputUninit is output for an op that writes every element of its
// result: clearing memory about to be overwritten cost up to an eighth of
// a training step where memory bandwidth is a few GB/s.
func outputUninit(be backend.Backend, shape ...int) *Tensor {
	return &Tensor{Shape: slices.Clone(shape), be: be, data: be.Alloc(numel(shape)), owned: true}
}

// scratch returns a buffer of n elements with unspecified contents.
func scratch(be backend.Backend, n int) backend.Buffer { return be.Alloc(n) }
