package tensor

import (
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
