// Package cpu is the reference implementation of backend.Backend, and the
// emulated device (NewEmulated) that runs the same kernels on memory the host
// cannot see. It needs
// no cgo: on amd64 the GEMM micro-kernels (AVX-512 12×32, AVX2 6×16), the
// sigmoid/SiLU, batch-norm and depthwise inner loops are Go assembly chosen
// from the CPU's features at start-up; every one has a portable Go twin
// that other architectures and the purego build tag use, and that the
// tests hold the assembly to.
//
// Work is split across goroutines (GOMAXPROCS by default); each kernel
// returns only after all of its goroutines finish, so callers see ordinary
// synchronous semantics. Scratch buffers (packed GEMM panels, im2col
// columns, per-worker filter gradients) come from a size-classed pool and
// are returned before the kernel returns: steady-state training allocates
// no scratch.
package cpu

import (
	"math/bits"
	"runtime"
	"sync"

	"github.com/segpipe/segpipe/internal/parfor"
)

// Kernels is the reference kernel set on host slices: every backend.Backend
// method's maths, with buffers already resolved to []float32. Backend and
// the emulated device run these; a device backend's tests run them as the
// oracle. The zero value uses GOMAXPROCS workers.
type Kernels struct {
	// Workers bounds the goroutines one kernel uses; 0 means GOMAXPROCS.
	Workers int
	// MinParallel is the element count below which the elementwise and
	// layout kernels stay on the calling goroutine; 0 means 65536. Tests
	// set 1 to drive the split paths on small shapes.
	MinParallel int
}

func (be *Kernels) workers() int {
	if be != nil && be.Workers > 0 {
		return be.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor calls fn over [0,n) split into at most w contiguous chunks.
func parallelFor(w, n int, fn func(lo, hi int)) { parfor.Blocks(max(w, 1), n, fn) }

// parallelTasks runs fn(worker, task) for every task in [0,n) with up to w
// goroutines pulling tasks dynamically, so uneven tasks balance out.
func parallelTasks(w, n int, fn func(worker, task int)) { parfor.Tasks(max(w, 1), n, fn) }

// Scratch pool: size classes are powers of two so a buffer freed by one
// kernel serves any later request of the same class.
var pools [48]sync.Pool

func getBuf(n int) []float32 {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if p, ok := pools[c].Get().(*[]float32); ok {
		return (*p)[:n]
	}
	return make([]float32, n, 1<<c)
}

func putBuf(b []float32) {
	if cap(b) == 0 {
		return
	}
	c := bits.Len(uint(cap(b) - 1))
	if 1<<c != cap(b) {
		return
	}
	b = b[:cap(b)]
	pools[c].Put(&b)
}

func zero(b []float32) {
	for i := range b {
		b[i] = 0
	}
}
