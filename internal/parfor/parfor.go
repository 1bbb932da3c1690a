// Package parfor runs loops across goroutines with a fixed, documented
// split, so that every parallel reduction built on it has one order and
// results are reproducible for a given worker count.
//
// Blocks hands out contiguous ranges (one per worker, always the same
// ranges for the same n and worker count); Tasks hands out single indices
// dynamically, for uneven work whose results land in slots owned by the
// index. Both return only when every call has finished.
package parfor

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// MinWork is the number of elements a loop should touch before it is worth
// spreading across goroutines: starting one costs about as much as
// touching this many floats.
const MinWork = 1 << 16

// Workers returns GOMAXPROCS when work (elements touched) reaches minWork,
// and 1 otherwise.
func Workers(work, minWork int) int {
	if work < minWork {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}

// Blocks calls fn over [0,n) split into at most w contiguous chunks
// [i·n/w, (i+1)·n/w), on the calling goroutine when w ≤ 1. A w ≤ 0 means
// GOMAXPROCS.
func Blocks(w, n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	w = min(w, n)
	if w <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	wg.Add(w)
	for i := 0; i < w; i++ {
		lo, hi := i*n/w, (i+1)*n/w
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// Tasks calls fn(worker, i) for every i in [0,n) on up to w goroutines that
// pull indices as they finish, so uneven tasks balance out; worker in
// [0, w) identifies the goroutine (for per-worker scratch). A w ≤ 0 means
// GOMAXPROCS. Callers write only to slots owned by i, so results do not
// depend on scheduling.
func Tasks(w, n int, fn func(worker, i int)) {
	if n <= 0 {
		return
	}
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	w = min(w, n)
	if w <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(w)
	for k := 0; k < w; k++ {
		go func(worker int) {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(worker, i)
			}
		}(k)
	}
	wg.Wait()
}
