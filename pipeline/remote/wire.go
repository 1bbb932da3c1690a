package remote

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec this one falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The Flight data path does not go through protobuf marshalling: the server
// writes each FlightData as a few hand-encoded field headers followed by the
// record's own buffers (referenced, not copied; released once gRPC has
// written them), and the client parses FlightData itself, reading the body
// straight into one fresh allocation that the Arrow record then aliases.
// Both are wire-compatible protobuf: any Flight client or server talks to
// them. Every other message falls back to the standard proto codec.

// FlightData field numbers (Flight.proto).
const (
	fdDescriptor = 1
	fdHeader     = 2
	fdApp        = 3
	fdBody       = 1000
)

// minRef is the size from which a body buffer is referenced instead of
// copied: below it the bookkeeping costs more than the copy.
const minRef = 64 << 10

// outMsg is one outgoing FlightData whose body aliases Arrow buffers.
type outMsg struct {
	header []byte
	app    []byte
	body   [][]byte
	// release runs once gRPC no longer needs body (written or dropped).
	release func()
	size    int  // bytes on the wire, set by Marshal
	encoded bool // Marshal ran: gRPC owns the release from then on
}

type codec struct {
	proto encoding.CodecV2
	// arena is the client's frame buffer pool, nil on the server.
	arena *arenaPool
}

func newCodec(arena *arenaPool) *codec {
	return &codec{proto: encoding.GetCodecV2("proto"), arena: arena}
}

func (c *codec) Name() string { return "proto" }

// refs counts the referenced buffers of one message; the last Put releases
// the message. It acts as the mem.BufferPool of those buffers.
type refs struct {
	n       atomic.Int32
	release func()
}

func (r *refs) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (r *refs) Put(*[]byte) {
	if r.n.Add(-1) == 0 && r.release != nil {
		r.release()
	}
}

func appendField(b []byte, field int, n int) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	return binary.AppendUvarint(b, uint64(n))
}

// grpcPrefix is gRPC's message prefix: compression flag and length.
const grpcPrefix = 5

// fdHead encodes FlightData's fields up to the body's length prefix, the
// IPC metadata followed by pad zero bytes.
func fdHead(header, app []byte, bodyLen, pad int) []byte {
	head := make([]byte, 0, len(header)+pad+len(app)+32)
	if len(header) > 0 {
		head = append(appendField(head, fdHeader, len(header)+pad), header...)
		head = append(head, make([]byte, pad)...)
	}
	if len(app) > 0 {
		head = append(appendField(head, fdApp, len(app)), app...)
	}
	if bodyLen > 0 {
		head = appendField(head, fdBody, bodyLen)
	}
	return head
}

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*outMsg)
	if !ok {
		return c.proto.Marshal(v)
	}
	bodyLen := 0
	for _, s := range m.body {
		bodyLen += len(s)
	}
	head := fdHead(m.header, m.app, bodyLen, 0)
	if bodyLen >= minRef && len(m.header) > 0 {
		// Pad the IPC metadata with zeros (readers parse its flatbuffer
		// and ignore what follows, as with the stream format's own
		// padding) until the body starts 8-byte aligned relative to the
		// gRPC message: a receiver that reads the message into aligned
		// memory can then use the body in place (arena.go).
		for pad := 0; (grpcPrefix+len(head))%8 != 0 && pad < 16; {
			pad++
			head = fdHead(m.header, m.app, bodyLen, pad)
		}
	}
	m.size = len(head) + bodyLen
	m.encoded = true
	r := &refs{release: m.release}
	r.n.Store(1) // held by Marshal until the slice is built
	out := mem.BufferSlice{}
	small := head
	for _, s := range m.body {
		if len(s) < minRef {
			small = append(small, s...)
			continue
		}
		if len(small) > 0 {
			out = append(out, mem.SliceBuffer(small))
			small = nil
		}
		r.n.Add(1)
		s := s
		out = append(out, mem.NewBuffer(&s, r))
	}
	if len(small) > 0 {
		out = append(out, mem.SliceBuffer(small))
	}
	r.Put(nil)
	return out, nil
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	var fd *flight.FlightData
	in, ok := v.(*inMsg)
	if !ok {
		if fd, ok = v.(*flight.FlightData); !ok {
			return c.proto.Unmarshal(data, v)
		}
	}
	if in != nil && c.arena != nil {
		c.arena.noteMessage(data.Len())
	}
	if err := c.unmarshal(data, fd, in); err != nil {
		// Protobuf encodings no Flight implementation writes (groups,
		// odd wire types): let protobuf itself decide.
		return c.fallback(data, fd, in, err)
	}
	return nil
}

func (c *codec) fallback(data mem.BufferSlice, fd *flight.FlightData, in *inMsg, cause error) error {
	var ref flight.FlightData
	if err := c.proto.Unmarshal(data, &ref); err != nil {
		return fmt.Errorf("%w (protobuf: %v)", cause, err)
	}
	if fd != nil {
		*fd = flight.FlightData{FlightDescriptor: ref.FlightDescriptor, DataHeader: ref.DataHeader, AppMetadata: ref.AppMetadata, DataBody: ref.DataBody}
		return nil
	}
	if in.body != nil {
		in.body.Release()
		in.body = nil
	}
	in.header, in.app = ref.DataHeader, ref.AppMetadata
	if len(ref.DataBody) > 0 {
		in.body = memory.NewBufferWithAllocator(in.mem.Allocate(len(ref.DataBody)), in.mem)
		copy(in.body.Bytes(), ref.DataBody)
	}
	return nil
}

func (c *codec) unmarshal(data mem.BufferSlice, fd *flight.FlightData, in *inMsg) error {
	rd := data.Reader()
	defer rd.Close()
	for rd.Remaining() > 0 {
		tag, err := binary.ReadUvarint(rd)
		if err != nil {
			return fmt.Errorf("flight data: tag: %w", err)
		}
		field, wt := tag>>3, tag&7
		switch wt {
		case 0:
			if _, err := binary.ReadUvarint(rd); err != nil {
				return fmt.Errorf("flight data: field %d: %w", field, err)
			}
			continue
		case 1, 5:
			n := 8
			if wt == 5 {
				n = 4
			}
			if _, err := rd.Discard(n); err != nil {
				return fmt.Errorf("flight data: field %d: %w", field, err)
			}
			continue
		case 2:
		default:
			return fmt.Errorf("flight data: field %d has wire type %d", field, wt)
		}
		n, err := binary.ReadUvarint(rd)
		if err != nil {
			return fmt.Errorf("flight data: field %d length: %w", field, err)
		}
		if n > uint64(rd.Remaining()) {
			return fmt.Errorf("flight data: field %d of %d bytes, %d left", field, n, rd.Remaining())
		}
		if in != nil && field == fdBody {
			if in.body != nil { // a repeated field: the last one wins
				in.body.Release()
				in.body = nil
			}
			if c.arena != nil {
				at := data.Len() - rd.Remaining()
				if b, held, ok := c.arena.frameBody(data, at, int(n)); ok {
					in.body = memory.NewBufferWithAllocator(b, held)
					if _, err := rd.Discard(int(n)); err != nil {
						return fmt.Errorf("flight data: body: %w", err)
					}
					continue
				}
			}
			// Allocate and wrap rather than Resize, which would zero
			// bytes that are overwritten at once.
			in.body = memory.NewBufferWithAllocator(in.mem.Allocate(int(n)), in.mem)
			if _, err := io.ReadFull(rd, in.body.Bytes()); err != nil {
				in.body.Release()
				in.body = nil
				return fmt.Errorf("flight data: body: %w", err)
			}
			continue
		}
		// A fresh allocation per field: the record aliases the body, and
		// a large Go allocation is aligned for every Arrow type.
		b := make([]byte, n)
		if _, err := io.ReadFull(rd, b); err != nil {
			return fmt.Errorf("flight data: field %d: %w", field, err)
		}
		if in != nil {
			switch field {
			case fdHeader:
				in.header = b
			case fdApp:
				in.app = b
			}
			continue
		}
		switch field {
		case fdDescriptor:
			fd.FlightDescriptor = new(flight.FlightDescriptor)
			if err := proto.Unmarshal(b, fd.FlightDescriptor); err != nil {
				return fmt.Errorf("flight data: descriptor: %w", err)
			}
		case fdHeader:
			fd.DataHeader = b
		case fdApp:
			fd.AppMetadata = b
		case fdBody:
			fd.DataBody = b
		}
	}
	return nil
}

// payloadSender is the ipc.PayloadWriter of one DoGet stream: it turns each
// IPC payload into an outMsg without copying its body.
type payloadSender struct {
	send func(*outMsg) error
	// next is attached to the next payload (the record being written).
	app     []byte
	release func()
	sent    int64 // wire bytes of the last message
	// skipSchema drops the writer's schema payload: the stream sent the
	// schema itself, before the loader's first batch was ready.
	skipSchema bool
}

type collector struct{ parts [][]byte }

func (c *collector) Write(p []byte) (int, error) {
	c.parts = append(c.parts, p)
	return len(p), nil
}

func (p *payloadSender) Start() error { return nil }

// sendSchema sends the schema message now, so that a client learns at once
// that its request was accepted, and makes the IPC writer skip its own.
func (p *payloadSender) sendSchema(schema *arrow.Schema, mem memory.Allocator) error {
	pl := ipc.GetSchemaPayload(schema, mem)
	defer pl.Release()
	if err := p.WritePayload(pl); err != nil {
		return err
	}
	p.skipSchema = true
	return nil
}
func (p *payloadSender) Close() error { return nil }

func (p *payloadSender) WritePayload(pl ipc.Payload) error {
	if p.skipSchema {
		p.skipSchema = false
		return nil
	}
	meta := pl.Meta()
	var header []byte
	if meta != nil {
		header = append([]byte(nil), meta.Bytes()...)
		meta.Release()
	}
	var c collector
	if err := pl.SerializeBody(&c); err != nil {
		return err
	}
	m := &outMsg{header: header, app: p.app, body: c.parts, release: p.release}
	p.app, p.release = nil, nil
	if len(c.parts) == 0 && m.release != nil {
		m.release()
		m.release = nil
	}
	err := p.send(m)
	if !m.encoded && m.release != nil {
		m.release()
	}
	p.sent = int64(m.size)
	return err
}
