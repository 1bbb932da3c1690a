package pipeline

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// pool is a memory.Allocator that recycles the large, repeating buffers of
// batches (images, masks, small columns): Free returns a buffer to a free
// list by power-of-two size class and Allocate reuses one. Steady-state
// batches therefore allocate no buffer memory. Retention is capped at
// maxBytes; beyond it freed buffers go to the garbage collector.
type pool struct {
	mu       sync.Mutex
	free     [48][][]byte
	held     int64
	maxBytes int64

	allocs, reuses atomic.Int64
}

func newPool(maxBytes int64) *pool { return &pool{maxBytes: maxBytes} }

func class(n int) int {
	if n <= 64 {
		return 6
	}
	return bits.Len(uint(n - 1))
}

// Allocate implements memory.Allocator. The contents are not zeroed when
// reused: every user of the pool writes every byte it exposes.
func (p *pool) Allocate(n int) []byte {
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
func (p *pool) Reallocate(n int, b []byte) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	nb := p.Allocate(n)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free implements memory.Allocator.
func (p *pool) Free(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 64 {
		return // not ours
	}
	k := bits.Len(uint(c - 1))
	p.mu.Lock()
	if p.held+int64(c) <= p.maxBytes {
		p.free[k] = append(p.free[k], b[:0])
		p.held += int64(c)
	}
	p.mu.Unlock()
}
