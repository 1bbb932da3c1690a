package tensor

import (
	"runtime"
	"sync"
)

// minParallel is the element count below which host-side loops in this
// package stay on the calling goroutine: spawning costs about as much as
// touching this many floats. Tests lower it to drive the split paths on
// small shapes.
var minParallel = 1 << 16

// parallel splits [0,n) into contiguous chunks across GOMAXPROCS
// goroutines when work (elements touched) is large enough to pay for it.
func parallel(n, work int, fn func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	if work < minParallel || w <= 1 || n <= 1 {
		fn(0, n)
		return
	}
	w = min(w, n)
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
