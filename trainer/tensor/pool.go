package tensor

import (
	"math"
	"slices"
	"sync"
)

// Gradient buffers of intermediates are recycled through exact-size pools:
// a model reuses the same few dozen tensor sizes every step, so a backward
// pass mostly draws buffers the previous op (or step) released instead of
// faulting in fresh memory. sync.Pool lets the GC drop idle buffers.
var bufPools sync.Map // int -> *sync.Pool of *[]float32

func poolFor(n int) *sync.Pool {
	if p, ok := bufPools.Load(n); ok {
		return p.(*sync.Pool)
	}
	p, _ := bufPools.LoadOrStore(n, &sync.Pool{})
	return p.(*sync.Pool)
}

// getZeroed returns a zero-filled buffer of length n.
func getZeroed(n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	if b, ok := poolFor(n).Get().(*[]float32); ok {
		clear(*b)
		return *b
	}
	return make([]float32, n)
}

// getBuf returns a buffer of length n with unspecified contents, for an
// op that writes every element: clearing memory about to be overwritten
// cost up to an eighth of a training step where memory bandwidth is a few
// GB/s. Built with the segpipe_poison tag, the buffer is filled with NaN
// so that an op relying on zeros it was not given fails its tests.
func getBuf(n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	var b []float32
	if p, ok := poolFor(n).Get().(*[]float32); ok {
		b = *p
	} else {
		b = make([]float32, n)
	}
	if poison {
		nan := float32(math.NaN())
		for i := range b {
			b[i] = nan
		}
	}
	return b
}

// putBuf hands a buffer back for reuse; the caller must drop every
// reference to it.
func putBuf(b []float32) {
	if len(b) == 0 || len(b) != cap(b) {
		return
	}
	poolFor(len(b)).Put(&b)
}

// output returns a zeroed tensor for an op's result, drawing its buffer
// from the pools that RecycleOutputs and the gradient recycling feed.
func output(shape ...int) *Tensor {
	return &Tensor{Shape: slices.Clone(shape), Data: getZeroed(numel(shape)), owned: true}
}

// outputUninit is output for an op that writes every element of its result.
func outputUninit(shape ...int) *Tensor {
	return &Tensor{Shape: slices.Clone(shape), Data: getBuf(numel(shape)), owned: true}
}
