package remote

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/segpipe/segpipe/internal/bufpool"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// FuzzParseRequest: any bytes give a request or an ErrBadRequest, never a
// panic; an accepted request survives Marshal unchanged.
func FuzzParseRequest(f *testing.F) {
	f.Add(testRequest().Marshal())
	f.Add([]byte(`{"version":1,"masks":"windowed","augment":{"mosaic":0.5,"fill":3}}`))
	f.Add([]byte(`{"version":1,"shards":"../x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error without ErrBadRequest: %v", err)
			}
			return
		}
		r2, err := ParseRequest(r.Marshal())
		if err != nil || !bytes.Equal(r.Marshal(), r2.Marshal()) {
			t.Fatalf("accepted request does not round-trip: %v", err)
		}
	})
}

// FuzzUnmarshalFlightData: the hand-written FlightData parser agrees with
// protobuf on every message protobuf accepts, and never panics.
func FuzzUnmarshalFlightData(f *testing.F) {
	seed, _ := proto.Marshal(&flight.FlightData{DataHeader: []byte("hdr"), AppMetadata: []byte(`{"seed":1}`), DataBody: bytes.Repeat([]byte{7}, 100)})
	f.Add(seed)
	f.Add([]byte{0x12, 0x80})
	c := newCodec(nil)
	pool := bufpool.New(1 << 20)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fd flight.FlightData
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &fd)
		var in inMsg
		in.mem = pool
		err2 := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &in)
		if in.body != nil {
			defer in.body.Release()
		}
		var ref flight.FlightData
		if proto.Unmarshal(b, &ref) != nil {
			return
		}
		if err != nil || err2 != nil {
			t.Fatalf("protobuf accepts the message, ours: %v / %v", err, err2)
		}
		if !bytes.Equal(fd.DataHeader, ref.DataHeader) || !bytes.Equal(fd.AppMetadata, ref.AppMetadata) || !bytes.Equal(fd.DataBody, ref.DataBody) {
			t.Fatal("fields differ from protobuf's")
		}
		var body []byte
		if in.body != nil {
			body = in.body.Bytes()
		}
		if !bytes.Equal(in.header, ref.DataHeader) || !bytes.Equal(in.app, ref.AppMetadata) || !bytes.Equal(body, ref.DataBody) {
			t.Fatal("pooled fields differ from protobuf's")
		}
	})
}
