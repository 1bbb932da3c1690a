package loss

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// workers is how many goroutines forEach uses for n items.
func workers(n int) int { return max(1, min(runtime.GOMAXPROCS(0), n)) }

// forEach calls f(w, i) for i in [0, n) on up to workers(n) goroutines; w
// identifies the goroutine (for per-worker scratch). Callers write only to
// slots owned by i and reduce in index order afterwards, so results do not
// depend on scheduling.
func forEach(n int, f func(w, i int)) {
	nw := workers(n)
	if nw == 1 {
		for i := 0; i < n; i++ {
			f(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(w, i)
			}
		}()
	}
	wg.Wait()
}
