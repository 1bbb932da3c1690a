package remote

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/mem"
)

// The client's gRPC buffer pool hands out the buffers that HTTP/2 DATA
// frames are read into as consecutive pieces of a large chunk. gRPC reads a
// connection's frames one after the other, and a message never shares a
// frame with another, so the frames of one batch message usually lie back to
// back in memory: the client then lets the Arrow record alias the body where
// it lies instead of copying it out (frameBody). Whenever they do not (the
// message straddles two chunks, frames of several streams interleave, a
// frame is cut short by flow control), the body is copied as before.

// arenaAlign aligns every frame buffer. Full DATA frames (16 KiB) are a
// multiple of it, so alignment keeps them contiguous, and a message starts at
// an aligned address: with the server's padding (wire.go) its body is 8-byte
// aligned, as the Arrow arrays that alias it require.
const arenaAlign = 64

// maxFrame is the DATA frame payload gRPC sends and accepts (16 KiB, the
// HTTP/2 default it does not negotiate up).
const maxFrame = 16 << 10

// Chunk sizes: the chunk grows to arenaMsgs times the largest message seen.
const (
	arenaMinChunk = 32 << 20
	arenaMaxChunk = 1 << 30
	arenaMsgs     = 4
)

type arenaChunk struct {
	buf  []byte
	off  int          // next free byte; only the current chunk moves it
	refs atomic.Int64 // frame buffers handed out and not yet put back, +1 while current
}

func (c *arenaChunk) contains(p unsafe.Pointer, n int) bool {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(c.buf)))
	a := uintptr(p)
	return a >= base && a+uintptr(n) <= base+uintptr(len(c.buf))
}

// arenaPool is a mem.BufferPool for one client's connections.
type arenaPool struct {
	mu      sync.Mutex
	cur     *arenaChunk
	chunks  []*arenaChunk // every chunk with buffers out, cur included
	spare   *arenaChunk   // one idle chunk kept for reuse
	maxMsg  atomic.Int64  // largest message seen by the codec
	short   bool          // the last frame was shorter than a full one
	inPlace atomic.Int64  // bodies used where they were read (tests)
	made    atomic.Int64  // chunks allocated (tests, benchmarks)
	other   mem.BufferPool
	backing memory.Allocator // where chunks come from; nil: the Go heap
	closed  bool             // no chunk is kept for reuse any more
}

// newArenaPool returns an arena whose chunks come from backing (nil: the Go
// heap). A chunk from backing goes back to its Free once nothing uses it
// and it is not kept as the spare; after close, every chunk does.
func newArenaPool(backing memory.Allocator) *arenaPool {
	return &arenaPool{other: wirePool, backing: backing}
}

// Get serves frame-sized requests from the current chunk; others (gRPC asks
// for a whole message only when it decompresses, which this package never
// asks it to do) from the shared pool.
func (p *arenaPool) Get(n int) *[]byte {
	if n > 64<<10 {
		return p.other.Get(n)
	}
	p.mu.Lock()
	if p.closed {
		// The connection is closing: its reader's last frames are never
		// bodies handed out.
		p.mu.Unlock()
		return p.other.Get(n)
	}
	c := p.cur
	var off int
	if c != nil {
		off = (c.off + arenaAlign - 1) &^ (arenaAlign - 1)
	}
	// After a short frame (most often a message's last) the next frame
	// probably starts a message: start a new chunk then if the largest
	// message would not fit, rather than let the message straddle two.
	if c == nil || off+n > len(c.buf) || p.short && len(c.buf)-off < int(p.maxMsg.Load()) {
		c = p.next()
		off = 0
	}
	p.short = n < maxFrame
	c.off = off + n
	c.refs.Add(1)
	p.mu.Unlock()
	b := c.buf[off : off+n : off+n]
	return &b
}

// next makes the spare or a fresh chunk current and then retires the old
// one. p.mu is held.
//
// The spare is taken before the old chunk is retired, so that the old one
// becomes the next spare: two chunks then take turns for as long as the
// message size holds. Retiring first would keep the old chunk when nothing
// still reads from it and drop the spare (one slot), and the next switch
// whose old chunk is still read from (a message held by the consumer,
// frames gRPC read ahead) would need a fresh chunk: measured, a fresh
// ~250 MiB chunk every 6–7 switches, 700 page faults a b32@640 batch.
func (p *arenaPool) next() *arenaChunk {
	old := p.cur
	size := int(min(max(arenaMsgs*p.maxMsg.Load(), arenaMinChunk), arenaMaxChunk))
	c := p.spare
	p.spare = nil
	if old != nil && old.refs.Add(-1) == 0 {
		p.retire(old)
	}
	if (c == nil || len(c.buf) < size) && p.spare != nil && len(p.spare.buf) >= size {
		p.free(c)
		c, p.spare = p.spare, nil // the old chunk, which nothing reads from
	}
	if c != nil && len(c.buf) < size {
		p.free(c)
		c = nil
	}
	if c == nil {
		// Fresh chunks are not cleared by anyone but the runtime (every
		// byte handed out is overwritten by a read before it is used),
		// but the runtime clears them: a quarter of headroom lets the
		// spare serve on when the largest message grows a little (windowed
		// batches vary in size) instead of a fresh chunk, cleared, each
		// time.
		n := min(size+size/4, arenaMaxChunk)
		if p.backing != nil {
			c = &arenaChunk{buf: p.backing.Allocate(n)}
		} else {
			c = &arenaChunk{buf: make([]byte, n)}
		}
		p.made.Add(1)
	}
	c.off = 0
	c.refs.Store(1)
	p.cur = c
	p.chunks = append(p.chunks, c)
	return c
}

// retire drops a chunk nobody uses any more, keeping it as the spare.
// p.mu is held.
func (p *arenaPool) retire(c *arenaChunk) {
	for i, x := range p.chunks {
		if x == c {
			p.chunks = append(p.chunks[:i], p.chunks[i+1:]...)
			break
		}
	}
	if p.closed {
		p.free(c)
		return
	}
	if p.spare == nil || len(c.buf) > len(p.spare.buf) {
		c, p.spare = p.spare, c
	}
	p.free(c)
}

// free gives an unused chunk back to the backing allocator (the collector
// takes a Go heap one). p.mu is held.
func (p *arenaPool) free(c *arenaChunk) {
	if c != nil && p.backing != nil {
		p.backing.Free(c.buf)
		c.buf = nil
	}
}

// close frees the spare and the chunks nothing uses any more; the others
// are freed as their last frame is put back. p.Get must not be called
// after it (the connection is closed).
func (p *arenaPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.free(p.spare)
	p.spare = nil
	if c := p.cur; c != nil {
		p.cur = nil
		if c.refs.Add(-1) == 0 {
			p.retire(c)
		}
	}
}

func (p *arenaPool) Put(b *[]byte) {
	ptr, n := unsafe.Pointer(unsafe.SliceData(*b)), cap(*b)
	p.mu.Lock()
	for _, c := range p.chunks {
		if c.contains(ptr, n) {
			if c.refs.Add(-1) == 0 {
				p.retire(c)
			}
			p.mu.Unlock()
			return
		}
	}
	p.mu.Unlock()
	p.other.Put(b)
}

// owns reports whether [ptr, ptr+n) lies inside one chunk with buffers out.
func (p *arenaPool) owns(ptr unsafe.Pointer, n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.chunks {
		if c.contains(ptr, n) {
			return true
		}
	}
	return false
}

// noteMessage records a message size for the next chunk's size.
func (p *arenaPool) noteMessage(n int) {
	for {
		m := p.maxMsg.Load()
		if int64(n) <= m || p.maxMsg.CompareAndSwap(m, int64(n)) {
			return
		}
	}
}

// heldFrames is the memory.Allocator of a body that aliases frame buffers:
// releasing the Arrow buffer frees the frames.
type heldFrames struct{ bufs []mem.Buffer }

func (h *heldFrames) Allocate(int) []byte           { panic("remote: heldFrames cannot allocate") }
func (h *heldFrames) Reallocate(int, []byte) []byte { panic("remote: heldFrames cannot allocate") }
func (h *heldFrames) Free([]byte) {
	for _, b := range h.bufs {
		b.Free()
	}
	h.bufs = nil
}

// frameBody returns the n bytes of data starting at off as one slice without
// copying, holding a reference on the frame buffers it spans, when they are
// consecutive pieces of one arena chunk and the start is 8-byte aligned;
// ok is false otherwise.
func (p *arenaPool) frameBody(data mem.BufferSlice, off, n int) (body []byte, held *heldFrames, ok bool) {
	if n == 0 {
		return nil, nil, false
	}
	var start unsafe.Pointer
	var next uintptr
	var spans []mem.Buffer
	need := n
	for _, b := range data {
		d := b.ReadOnlyData()
		if off >= len(d) {
			off -= len(d)
			continue
		}
		d = d[off:]
		off = 0
		a := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
		if start == nil {
			if a%8 != 0 {
				return nil, nil, false
			}
			start = unsafe.Pointer(unsafe.SliceData(d))
		} else if a != next {
			return nil, nil, false
		}
		spans = append(spans, b)
		take := min(len(d), need)
		need -= take
		next = a + uintptr(take)
		if need == 0 {
			break
		}
	}
	// Consecutive addresses alone could be two neighbouring allocations:
	// only inside one chunk is the range one Go object.
	if need != 0 || !p.owns(start, n) {
		return nil, nil, false
	}
	for _, b := range spans {
		b.Ref()
	}
	p.inPlace.Add(1)
	return unsafe.Slice((*byte)(start), n), &heldFrames{bufs: spans}, true
}
