//go:build cgo

package main

import (
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/internal/bufpool"
)

// poolIdle is how long a batch pool outlives the last session using it.
// A Python loader opens the library once per epoch pass and the next pass
// opens a few milliseconds after the last one closed (validation between
// epochs takes seconds); a pool idle for longer gives its buffers back.
var poolIdle = 10 * time.Second

// pools keeps the batch buffers of a finished pass for the next one. A
// loader's own pool (pipeline, internal/bufpool) starts empty and, on
// close, hands what it retained back to its allocator: without a pool
// that outlives it every epoch pass would allocate its first Prefetch+4
// batches' buffers afresh from malloc (fresh pages, faulted and zeroed by
// the kernel: 46 MB a batch at batch 32, 640 px), which cost the in-process
// loader about 5 % of bench's throughput on 30-batch epochs. Pools are
// keyed by the backing allocator and the retention the loader's estimate
// allows (its Memory().Batches), so a pass retains no more than a loader
// of its settings would.
var pools = struct {
	sync.Mutex
	m map[poolKey]*sharedPool
}{m: map[poolKey]*sharedPool{}}

type poolKey struct {
	backing memory.Allocator
	retain  int64
}

type sharedPool struct {
	key   poolKey
	pool  *bufpool.Pool
	open  int
	timer *time.Timer
}

// acquirePool returns the pool for (backing, retain), made if need be, and
// counts a session on it; releasePool ends that session.
func acquirePool(backing memory.Allocator, retain int64) *sharedPool {
	k := poolKey{backing, retain}
	pools.Lock()
	defer pools.Unlock()
	p := pools.m[k]
	if p == nil {
		p = &sharedPool{key: k, pool: bufpool.NewOn(backing, retain)}
		pools.m[k] = p
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.open++
	return p
}

// releasePool ends a session on p: when it was the last one, the pool is
// closed (its buffers freed) after poolIdle unless a session opens it
// again first.
func releasePool(p *sharedPool) {
	pools.Lock()
	defer pools.Unlock()
	if p.open--; p.open == 0 {
		p.timer = time.AfterFunc(poolIdle, func() { closeIdlePool(p) })
	}
}

func closeIdlePool(p *sharedPool) {
	pools.Lock()
	if pools.m[p.key] != p || p.open > 0 {
		pools.Unlock()
		return
	}
	delete(pools.m, p.key)
	pools.Unlock()
	p.pool.Close() // buffers still held by a consumer go back to backing when it frees them
}

// closeIdlePools closes every pool no session uses now, without waiting
// for poolIdle (tests that count every byte back).
func closeIdlePools() {
	pools.Lock()
	var idle []*sharedPool
	for k, p := range pools.m {
		if p.open == 0 {
			if p.timer != nil {
				p.timer.Stop()
			}
			delete(pools.m, k)
			idle = append(idle, p)
		}
	}
	pools.Unlock()
	for _, p := range idle {
		p.pool.Close()
	}
}
