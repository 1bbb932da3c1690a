package remote

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/bufpool"
	"github.com/segpipe/segpipe/pipeline/raster"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// FuzzParseRequest: any bytes give a request or an ErrBadRequest of bounded
// size, never a panic; an accepted request names its shard set in clean
// form within MaxShardsLen and survives Marshal unchanged. The
// same holds for ParseLocalRequest (the in-process library's), which must
// also accept every ticket ParseRequest accepts with a non-empty shards.
func FuzzParseRequest(f *testing.F) {
	f.Add(testRequest().Marshal())
	f.Add([]byte(`{"version":1,"masks":"windowed","augment":{"mosaic":0.5,"fill":3}}`))
	f.Add([]byte(`{"version":1,"shards":"../x"}`))
	f.Add([]byte(`{"version":1,"masks":"` + strings.Repeat("é", 2000) + `"}`))
	f.Add([]byte(`{"version":1,"shards":"val` + strings.Repeat("/.", 50_000) + `"}`))
	f.Add([]byte(`{"version":1,"shards":"val/"}`))
	f.Add([]byte(`{"version":1,"shards":"./a//b/."}`))
	f.Add([]byte(`{"version":1,"shards":"` + strings.Repeat("a", MaxShardsLen) + `"}`))
	f.Add([]byte(`{"version":1,"shards":"s3://bucket/set"}`))
	f.Add([]byte(`{"version":1,"shards":"synth","max_memory":-5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error without ErrBadRequest: %v", err)
			}
			if len(err.Error()) > maxErrorMessage {
				t.Fatalf("error of %d bytes for a %d-byte ticket", len(err.Error()), len(b))
			}
			return
		}
		if len(r.Shards) > MaxShardsLen {
			t.Fatalf("accepted shards %.80q (%d bytes): over MaxShardsLen", r.Shards, len(r.Shards))
		}
		r2, err := ParseRequest(r.Marshal())
		if err != nil || !bytes.Equal(r.Marshal(), r2.Marshal()) {
			t.Fatalf("accepted request does not round-trip: %v", err)
		}
		if r.Shards != "" {
			if l, err := ParseLocalRequest(b); err != nil || !bytes.Equal(l.Marshal(), r.Marshal()) {
				t.Fatalf("ParseLocalRequest differs from ParseRequest on an accepted ticket: %v", err)
			}
		}
	})
}

// FuzzParseLocalRequest: the library's request parser never panics and
// bounds its errors, whatever a C caller passes.
func FuzzParseLocalRequest(f *testing.F) {
	f.Add([]byte(`{"version":1,"shards":"/data/coco/train2017","masks":"windowed"}`))
	f.Add([]byte(`{"version":1,"shards":"s3://b/p?endpoint=http://x"}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseLocalRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || len(err.Error()) > maxErrorMessage {
				t.Fatalf("error %q (%d bytes) for a %d-byte request", err, len(err.Error()), len(b))
			}
			return
		}
		if r.Shards == "" {
			t.Fatal("accepted a request without shards")
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

// FuzzExpand: a windowed record whose windows, crowd flags, mask-data
// offsets and mask bytes are whatever a server sent either expands into a
// batch that keeps the contract or fails with an error, never a panic; and
// the check of a stream that delivers it windowed (OpenWindowed) refuses
// exactly what the expansion refuses, and what it accepts expands, through
// batch.MaskWindowsOf and raster.Expand, into the same stack.
func FuzzExpand(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0}, uint8(3))
	f.Add([]byte{2, 1, 255, 255, 255, 127, 9}, uint8(5))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, k uint8) {
		rng := rand.New(rand.NewPCG(uint64(k), 1))
		bpi := []int32{int32(k % 3), int32(k % 5), 1}
		rec := randomBatch(t, rng, bpi, 16, 4)
		defer rec.Release()
		mem := memory.NewGoAllocator()
		win, err := newWindower(rec.Schema(), 4, 4, mem).encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		defer win.Release()
		// Overwrite the content, not the layout, of what the wire carries.
		bufs := []*memory.Buffer{
			win.Column(nDense).Data().Children()[0].Children()[0].Buffers()[1], // windows
			win.Column(7).Data().Children()[0].Buffers()[1],                    // iscrowd
			win.Column(nDense + 1).Data().Buffers()[1],                         // mask_data offsets
			win.Column(nDense + 1).Data().Buffers()[2],                         // mask bytes
		}
		i := 0
		for _, buf := range bufs {
			if buf == nil {
				continue
			}
			dst := buf.Bytes()
			for j := range dst {
				if len(b) == 0 {
					break
				}
				dst[j] = b[i%len(b)]
				i++
			}
		}
		e, err := newExpander(win.Schema(), mem)
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.expand(win)
		kept, errKept := e.windowed(win)
		if (err == nil) != (errKept == nil) {
			t.Fatalf("expansion error %v, windowed delivery's %v", err, errKept)
		}
		if err != nil {
			return
		}
		defer out.Release()
		defer kept.Release()
		mw, err := batch.MaskWindowsOf(kept)
		if err != nil {
			t.Fatalf("a checked windowed record: %v", err)
		}
		wins, err := raster.WindowsOf(mw.Windows)
		if err != nil {
			t.Fatal(err)
		}
		again := make([]byte, mw.Count()*mw.Rows*mw.Cols)
		if err := raster.Expand(again, e.grid, wins, mw.Data); err != nil {
			t.Fatalf("a checked windowed record does not expand: %v", err)
		}
		ms, err := batch.MaskStack(out)
		if err != nil {
			t.Fatal(err)
		}
		crowd, err := batch.CrowdFlags(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms.Data) != ms.Count*16 || len(crowd) < ms.Count {
			t.Fatalf("%d mask bytes and %d crowd flags for %d instances", len(ms.Data), len(crowd), ms.Count)
		}
		if !bytes.Equal(again, ms.Data) {
			t.Fatal("the windowed record expands to another stack than the expansion's")
		}
		for _, v := range crowd[:ms.Count] {
			if v > 1 {
				t.Fatalf("iscrowd %d accepted", v)
			}
		}
	})
}
