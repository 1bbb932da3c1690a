package cuda

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// planCacheEnv names the file cuDNN's algorithm choices are kept in across
// processes ("off": none). By default it is segpipe/cudnn-plans.json under
// the user's cache directory. A choice is keyed by the GPU (name and
// compute capability), cuDNN's version, the math and planning mode, and
// the convolution's shape, so that a new process — each test of
// scripts/gpu-check.sh, a resumed run, validation in a fresh process —
// does not time every candidate of every shape again (seconds a shape).
const planCacheEnv = "SEGPIPE_CUDNN_CACHE"

// algoChoice is one pass's algorithm and the math type it runs in.
type algoChoice struct {
	Algo int32 `json:"algo"`
	Math int32 `json:"math"`
}

// planCache is the process's view of the file: loaded once, written
// whole (to a temporary file renamed over it) after each new choice, so a
// process killed mid-run keeps what it found.
type planCache struct {
	mu     sync.Mutex
	loaded bool
	path   string
	m      map[string][3]algoChoice
}

var plans planCache

func (c *planCache) loadLocked() {
	if c.loaded {
		return
	}
	c.loaded, c.m = true, map[string][3]algoChoice{}
	c.path = os.Getenv(planCacheEnv)
	if c.path == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			c.path = "off"
			return
		}
		c.path = filepath.Join(dir, "segpipe", "cudnn-plans.json")
	}
	if c.path == "off" {
		return
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return // none yet
	}
	// A damaged file is a cache miss for every shape, not an error: the
	// searches run and the file is written again.
	_ = json.Unmarshal(b, &c.m)
}

func (c *planCache) get(key string) ([3]algoChoice, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadLocked()
	v, ok := c.m[key]
	return v, ok
}

// putPass records the choice of one pass (the others of a new entry
// unknown: Algo -1) and rewrites the file; a file that cannot be written
// costs the next process its searches, nothing else.
func (c *planCache) putPass(key string, pass int, v algoChoice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loadLocked()
	e, ok := c.m[key]
	if !ok {
		e = [3]algoChoice{{Algo: -1}, {Algo: -1}, {Algo: -1}}
	}
	e[pass] = v
	c.m[key] = e
	if c.path == "off" {
		return
	}
	b, err := json.MarshalIndent(c.m, "", " ")
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return
	}
	_ = atomicfile.WriteFile(c.path, b, 0o644)
}

// planKey is the cache key of c planned by dn on d.
//
// The batch size is not in the key: a choice made at one N is tried
// first at every other (validation's batches, an epoch's short last
// batch), its workspace sized for that N, and searched again only where
// cuDNN refuses it (planLocked), rather than every candidate timed again
// for each N.
func planKey(d *device, dn *dnn, c convShape) string {
	mode := "search"
	if dn.heuristic {
		mode = "heuristic"
	}
	c.N = 0
	return fmt.Sprintf("%s sm_%d%d cudnn %d math %d %s any-N %+v", d.Name, d.Major, d.Minor, int(ccall(dn.api.getVersion)), dn.math, mode, c)
}
