package remote

import (
	"math/bits"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
)

// inMsg is one incoming FlightData as the client's codec decodes it: the
// body lands in a buffer of the stream's allocator, so that the memory of a
// released batch serves the next one (no zeroing, no garbage).
type inMsg struct {
	mem    memory.Allocator
	header []byte
	app    []byte
	body   *memory.Buffer // nil for messages without a body
}

// msgReader is the ipc.MessageReader of a DoGet stream.
type msgReader struct {
	st   grpc.ClientStream
	mem  memory.Allocator
	last *ipc.Message
	app  []byte
}

func (r *msgReader) Message() (*ipc.Message, error) {
	if r.last != nil {
		// The ipc reader never releases messages; by now it has made its
		// record, which holds its own references to the body.
		r.last.Release()
		r.last = nil
	}
	m := inMsg{mem: r.mem}
	if err := r.st.RecvMsg(&m); err != nil {
		return nil, err
	}
	body := m.body
	if body == nil {
		body = memory.NewBufferBytes(nil)
	} else {
		defer body.Release()
	}
	r.app = m.app
	r.last = ipc.NewMessage(memory.NewBufferBytes(m.header), body)
	return r.last, nil
}

func (r *msgReader) Retain() {}
func (r *msgReader) Release() {
	if r.last != nil {
		r.last.Release()
		r.last = nil
	}
}

// dirtyPool is the gRPC buffer pool of both ends: gRPC's default pool
// clears every buffer it hands out, although every byte is then
// overwritten by a read; at gigabytes per second that clearing is a sixth
// of the CPU time.
type dirtyPool struct{ classes [48]sync.Pool }

var wirePool = &dirtyPool{}

func (p *dirtyPool) Get(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	p.classes[bits.Len(uint(c-1))].Put(b)
}
