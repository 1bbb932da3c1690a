// Package bufpool is a memory.Allocator that recycles large, repeating
// byte buffers (batch images and masks, received message bodies): Free
// returns a buffer to a free list by power-of-two size class and Allocate
// reuses one, so steady-state batches allocate no buffer memory.
//
// Reused buffers are not zeroed: every user of a Pool writes every byte it
// exposes. Retention is capped; beyond the cap freed buffers go to the
// garbage collector.
package bufpool

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Pool recycles buffers up to a retention cap. Its methods are safe for
// concurrent use.
type Pool struct {
	mu       sync.Mutex
	free     [48][][]byte
	held     int64
	maxBytes int64

	allocs, reuses atomic.Int64
}

// New returns a Pool that retains at most maxBytes of freed buffers.
func New(maxBytes int64) *Pool { return &Pool{maxBytes: maxBytes} }

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
	return make([]byte, n, 1<<c)
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
// capacity that is not a power of two of at least 64) are left to the
// garbage collector.
func (p *Pool) Free(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 64 {
		return
	}
	k := bits.Len(uint(c - 1))
	p.mu.Lock()
	if p.held+int64(c) <= p.maxBytes {
		p.free[k] = append(p.free[k], b[:0])
		p.held += int64(c)
	}
	p.mu.Unlock()
}

// Counts reports how many Allocate calls made a new buffer and how many
// reused a freed one.
func (p *Pool) Counts() (allocs, reuses int64) { return p.allocs.Load(), p.reuses.Load() }
