//go:build cgo

package main

import (
	"runtime/debug"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/internal/bufpool"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// poolIdle is how long a batch pool or a decoded-image cache outlives the
// last session using it. A Python loader opens the library once per epoch
// pass and the next pass opens a few milliseconds after the last one
// closed (validation between epochs takes seconds); one idle for longer
// is freed.
var poolIdle = 10 * time.Second

// shared is a registry of values that sessions with the same key share,
// counted by the sessions open on them and closed poolIdle after the last
// one ends, unless a session opens one again first.
type shared[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]*entry[K, V]
	make  func(K) V
	close func(V)
	// closing counts the closes a timer started; closeAllIdle waits for
	// them, so that after it returns every idle value has been closed.
	closing sync.WaitGroup
}

type entry[K comparable, V any] struct {
	key   K
	value V
	open  int
	timer *time.Timer
}

// acquire returns k's entry, made if need be, and counts a session on it.
func (r *shared[K, V]) acquire(k K) *entry[K, V] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[K]*entry[K, V]{}
	}
	e := r.m[k]
	if e == nil {
		e = &entry[K, V]{key: k, value: r.make(k)}
		r.m[k] = e
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.open++
	return e
}

// release ends a session on e: after the last one, e is closed poolIdle
// later unless acquired again first.
func (r *shared[K, V]) release(e *entry[K, V]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.open--; e.open == 0 {
		e.timer = time.AfterFunc(poolIdle, func() { r.closeIdle(e) })
	}
}

// forget ends a session on e and, when no other session uses it, removes
// e at once without closing it: a value whose making failed is not kept
// for the next open to find.
func (r *shared[K, V]) forget(e *entry[K, V]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.open--; e.open == 0 && r.m[e.key] == e {
		delete(r.m, e.key)
	}
}

func (r *shared[K, V]) closeIdle(e *entry[K, V]) {
	r.mu.Lock()
	if r.m[e.key] != e || e.open > 0 {
		r.mu.Unlock()
		return
	}
	delete(r.m, e.key)
	r.closing.Add(1)
	r.mu.Unlock()
	defer r.closing.Done()
	r.close(e.value)
}

// closeAllIdle closes every entry no session uses now, without waiting
// for poolIdle (tests that count every byte back), and waits for the
// closes a timer has begun.
func (r *shared[K, V]) closeAllIdle() {
	r.mu.Lock()
	var idle []*entry[K, V]
	for k, e := range r.m {
		if e.open == 0 {
			if e.timer != nil {
				e.timer.Stop()
			}
			delete(r.m, k)
			idle = append(idle, e)
		}
	}
	r.mu.Unlock()
	for _, e := range idle {
		r.close(e.value)
	}
	r.closing.Wait()
}

// len is the number of entries, idle ones included.
func (r *shared[K, V]) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

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
var pools = shared[poolKey, *bufpool.Pool]{
	make: func(k poolKey) *bufpool.Pool { return bufpool.NewOn(k.backing, k.retain) },
	// Buffers still held by a consumer go back to backing when it frees them.
	close: func(p *bufpool.Pool) { p.Close() },
}

type poolKey struct {
	backing memory.Allocator
	retain  int64
}

type sharedPool = entry[poolKey, *bufpool.Pool]

// caches holds one decoded-image cache per shard set and bound while
// sessions use it, and poolIdle after. A Python loader opens the library
// once per epoch pass; like the epochs of one Go loader, and like the
// streams of one shard set in a server, the passes share the set's decoded
// images instead of decoding every image again each epoch. A cache no
// session has used for poolIdle is dropped: its pixels are Go memory, so
// its pages go back to the system with debug.FreeOSMemory, as a closed
// Loader's should.
var caches = shared[cacheKey, *pipeline.ImageCache]{
	make: func(k cacheKey) *pipeline.ImageCache { return pipeline.NewImageCache(k.cacheBytes) },
	close: func(*pipeline.ImageCache) {
		// Off the registry's lock and the timer's goroutine: a full
		// collection and scavenge take milliseconds per GB.
		go debug.FreeOSMemory()
	},
}

type sharedCache = entry[cacheKey, *pipeline.ImageCache]

// clients keeps a server's connection, and its receive arena, for the
// next pass: a Python trainer opens the library once per epoch pass, and
// a client made afresh each time would reconnect and fault in its receive
// chunks (two of about 4 batches each) again every epoch.
var clients = shared[clientKey, *sharedClient]{
	make: func(k clientKey) *sharedClient {
		cfg, err := k.config()
		if err != nil {
			return &sharedClient{nil, err}
		}
		c, err := remote.NewClient(cfg)
		return &sharedClient{c, err}
	},
	close: func(c *sharedClient) {
		if c.err == nil {
			c.client.Close() // records still held free their memory as released
		}
	},
}

// clientKey is what a remote session's client is made from.
type clientKey struct {
	addr, token, roots  string
	tls                 bool
	retries             int
	backoff, maxBackoff time.Duration
	mem                 memory.Allocator
}

type sharedClient struct {
	client *remote.Client
	err    error
}

type clientEntry = entry[clientKey, *sharedClient]

// closeIdlePools closes every pool, cache and client no session uses now.
func closeIdlePools() {
	pools.closeAllIdle()
	caches.closeAllIdle()
	clients.closeAllIdle()
}
