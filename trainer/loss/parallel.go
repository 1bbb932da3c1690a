package loss

import (
	"runtime"

	"github.com/segpipe/segpipe/internal/parfor"
)

// workers is how many goroutines forEach uses for n items.
func workers(n int) int { return max(1, min(runtime.GOMAXPROCS(0), n)) }

// forEach calls f(w, i) for i in [0, n) on up to workers(n) goroutines; w
// identifies the goroutine (for per-worker scratch). Callers write only to
// slots owned by i and reduce in index order afterwards, so results do not
// depend on scheduling.
func forEach(n int, f func(w, i int)) { parfor.Tasks(workers(n), n, f) }
