// Package bufpool is a memory.Allocator that recycles large, repeating
// byte buffers (batch images and masks, received message bodies): Free
// returns a buffer to a free list by power-of-two size class and Allocate
// reuses one, so steady-state batches allocate no buffer memory.
//
// Reused buffers are not zeroed: every user of a Pool writes every byte it
// exposes. Retention is capped; beyond the cap freed buffers go back to
// where they came from.
//
// # Backing memory
//
// New makes its buffers on the Go heap: a buffer freed beyond the cap is
// left to the garbage collector. NewOn takes them from a backing
// memory.Allocator instead, one whole size class (a power of two of at
// least 64 bytes) at a time, and gives every one back to that allocator's
// Free: a buffer freed beyond the cap at once, the retained ones at Close,
// and after Close every buffer as it is freed. With a C allocator
// (arrow-go's mallocator) every buffer is C memory, which C code may keep
// after a cgo call returns (the Arrow C data interface); with a checked
// allocator a test sees every byte come back.
package bufpool

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Pool recycles buffers up to a retention cap. Its methods are safe for
// concurrent use.
type Pool struct {
	mu       sync.Mutex
	free     [48][][]byte
	held     int64
	maxBytes int64
	backing  memory.Allocator // nil: the Go heap
	closed   bool

	allocs, reuses atomic.Int64
}

// New returns a Pool on the Go heap that retains at most maxBytes of freed
// buffers.
func New(maxBytes int64) *Pool { return &Pool{maxBytes: maxBytes} }

// NewOn returns a Pool whose buffers come from backing and go back to its
// Free (see the package doc); it retains at most maxBytes of freed
// buffers. A nil backing is New.
func NewOn(backing memory.Allocator, maxBytes int64) *Pool {
	return &Pool{maxBytes: maxBytes, backing: backing}
}

func class(n int) int {
	if n <= 64 {
		return 6
	}
	return bits.Len(uint(n - 1))
}

// Allocate implements memory.Allocator. The contents are not zeroed when
// a buffer is reused.
func (p *Pool) Allocate(n int) []byte {
	c := class(n)
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		p.held -= int64(cap(b))
		p.mu.Unlock()
		p.reuses.Add(1)
		return b[:n]
	}
	p.mu.Unlock()
	p.allocs.Add(1)
	if p.backing == nil {
		return make([]byte, n, 1<<c)
	}
	size := 1 << c
	// Full slice expression: the class is the capacity Free sees, whatever
	// spare capacity the backing allocator returned.
	return p.backing.Allocate(size)[:n:size]
}

// Reallocate implements memory.Allocator.
func (p *Pool) Reallocate(n int, b []byte) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	nb := p.Allocate(n)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free implements memory.Allocator. Buffers the Pool did not make (a
// capacity that is not a power of two of at least 64) are left alone: to
// the garbage collector, or to whoever allocated them.
func (p *Pool) Free(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 64 {
		return
	}
	k := bits.Len(uint(c - 1))
	p.mu.Lock()
	if !p.closed && p.held+int64(c) <= p.maxBytes {
		p.free[k] = append(p.free[k], b[:0])
		p.held += int64(c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.release(b)
}

// release gives a buffer the pool does not keep back to its backing
// allocator, whole.
func (p *Pool) release(b []byte) {
	if p.backing != nil {
		p.backing.Free(b[:cap(b)])
	}
}

// Close gives every retained buffer back (to the backing allocator, or to
// the garbage collector) and makes the pool retain nothing from then on:
// buffers freed later go straight back. The pool still allocates after
// Close, without reuse. Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	var out [][]byte
	for k := range p.free {
		out = append(out, p.free[k]...)
		p.free[k] = nil
	}
	p.held = 0
	p.closed = true
	p.mu.Unlock()
	for _, b := range out {
		p.release(b)
	}
}

// Counts reports how many Allocate calls made a new buffer and how many
// reused a freed one.
func (p *Pool) Counts() (allocs, reuses int64) { return p.allocs.Load(), p.reuses.Load() }
