package remote

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/bufpool"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
)

// preparedBatch builds one batch of n images at size s with k instances an
// image, each mask a random block: the coco-tiny shape of a batch without
// the loader's cost.
func preparedBatch(tb testing.TB, n, s, k int) arrow.RecordBatch {
	tb.Helper()
	hp := s / 4
	b, err := batch.NewBuilder(s, s, hp, hp)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := func(size int) *memory.Buffer {
		m := memory.NewResizableBuffer(memory.DefaultAllocator)
		m.Resize(size)
		return m
	}
	c := batch.Columns{N: n, SumN: n * k}
	c.Images, c.ImageIDs, c.OrigHeight, c.OrigWidth = buf(n*3*s*s), buf(8*n), buf(4*n), buf(4*n)
	c.Transforms, c.BoxesPerImage, c.Offsets = buf(48*n), buf(4*n), buf(4*(n+1))
	c.Boxes, c.Classes, c.Masks = buf(16*n*k), buf(4*n*k), buf(n*k*hp*hp)
	for i := range c.Images.Bytes() {
		c.Images.Bytes()[i] = byte(rng.Uint32())
	}
	bpi, offs := arrow.Int32Traits.CastFromBytes(c.BoxesPerImage.Bytes()), arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())
	for i := 0; i < n; i++ {
		bpi[i], offs[i+1] = int32(k), int32((i+1)*k)
	}
	m := c.Masks.Bytes()
	for j := 0; j < n*k; j++ {
		w, h := 4+rng.IntN(hp/4), 4+rng.IntN(hp/4)
		x0, y0 := rng.IntN(hp-w), rng.IntN(hp-h)
		for r := y0; r < y0+h; r++ {
			for x := x0; x < x0+w; x++ {
				m[j*hp*hp+r*hp+x] = 1
			}
		}
	}
	rec, err := b.Build(&c)
	if err != nil {
		tb.Fatal(err)
	}
	for _, x := range []*memory.Buffer{c.Images, c.ImageIDs, c.OrigHeight, c.OrigWidth, c.Transforms, c.BoxesPerImage, c.Offsets, c.Boxes, c.Classes, c.Masks} {
		x.Release()
	}
	return rec
}

func bodyBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += dataBytes(col.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

// repeater serves one record forever.
type repeater struct {
	rec arrow.RecordBatch
	n   int64
}

func (r *repeater) Next(context.Context) (arrow.RecordBatch, error) {
	r.rec.Retain()
	r.n++
	return r.rec, nil
}
func (r *repeater) State() order.State { return order.State{Consumed: r.n} }
func (r *repeater) Close() error       { return nil }

// naiveServer is the baseline: arrow-go's flight.NewRecordWriter on a
// default gRPC server (protobuf marshalling, default windows).
type naiveServer struct {
	flight.BaseFlightServer
	rec arrow.RecordBatch
}

func (s *naiveServer) DoGet(_ *flight.Ticket, st flight.FlightService_DoGetServer) error {
	w := flight.NewRecordWriter(st, ipc.WithSchema(s.rec.Schema()))
	defer w.Close()
	for {
		if err := w.Write(s.rec); err != nil {
			return err
		}
	}
}

// BenchmarkFlightStream measures one loopback Flight stream of a prepared
// batch (32 images at 640², 8 instances an image, dense masks): this
// package's server and client against the naive arrow-go setup in the
// same run. B/s is body bytes of Arrow buffers.
func BenchmarkFlightStream(b *testing.B) {
	rec := preparedBatch(b, 32, 640, 8)
	defer rec.Release()
	size := bodyBytes(rec)

	b.Run("naive", func(b *testing.B) {
		gs := grpc.NewServer()
		flight.RegisterFlightServiceServer(gs, &naiveServer{rec: rec})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go gs.Serve(lis)
		defer gs.Stop()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := flight.NewFlightServiceClient(conn).DoGet(ctx, &flight.Ticket{})
		if err != nil {
			b.Fatal(err)
		}
		rdr, err := flight.NewRecordReader(st)
		if err != nil {
			b.Fatal(err)
		}
		defer rdr.Release()
		b.SetBytes(size)
		cpu0 := cpuSeconds()
		for b.Loop() {
			if !rdr.Next() {
				b.Fatal(rdr.Err())
			}
		}
		if cpu := cpuSeconds() - cpu0; cpu > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/cpu/1e6, "MB/cpu-s")
		}
	})

	b.Run("segpipe", func(b *testing.B) {
		srv := startServer(b, nil, ServerConfig{newBatches: func(context.Context, pipeline.Source, pipeline.Config) (pipeline.Batches, error) {
			return &repeater{rec: rec}, nil
		}})
		c := client(b, ClientConfig{Addr: srv.addr})
		req := Request{Shards: "synth", ImgSz: 640, BatchSize: 32}
		s, err := c.Stream(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.SetBytes(size)
		cpu0 := cpuSeconds()
		for b.Loop() {
			r, err := s.Next(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			r.Release()
		}
		if cpu := cpuSeconds() - cpu0; cpu > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/cpu/1e6, "MB/cpu-s")
		}
		b.ReportMetric(100*float64(c.arena.inPlace.Load())/float64(b.N), "%in-place")
	})
}

// BenchmarkServeCocoTiny compares images/s of the in-process loader with
// the same loader behind a loopback server, on the loader issue's setting:
// coco-tiny's 160 images repeated to 1,280, batch 32, imgsz 640, mosaic
// 1.0, masks at stride 4. Server and client share the machine's cores.
func BenchmarkServeCocoTiny(b *testing.B) {
	rows, _ := cocoTinyRows(b)
	src := func() pipeline.Source { return pipeline.Repeat(&pipeline.SliceSource{Rows: rows, BlockSize: 16}, 8) }
	req := Request{Shards: "coco", BatchSize: 32, ImgSz: 640, Epochs: 1000}
	var cpu0 float64
	start := func(b *testing.B) { b.ResetTimer(); cpu0 = cpuSeconds() }
	report := func(b *testing.B, images int64) {
		b.ReportMetric(float64(images)/b.Elapsed().Seconds(), "images/s")
		if cpu := cpuSeconds() - cpu0; cpu > 0 {
			b.ReportMetric(float64(images)/cpu, "images/cpu-s")
		}
	}
	b.Run("local", func(b *testing.B) {
		cfg, err := req.Config(pipeline.Config{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := pipeline.New(context.Background(), src(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		var images int64
		start(b)
		for b.Loop() {
			rec, err := l.Next(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			images += rec.NumRows()
			rec.Release()
		}
		report(b, images)
	})
	for _, masks := range []string{MasksDense, MasksWindowed} {
		b.Run("remote-"+masks, func(b *testing.B) {
			srv := startServer(b, nil, ServerConfig{Open: func(context.Context, string) (pipeline.Source, error) { return src(), nil },
				Loader: pipeline.Config{}})
			c := client(b, ClientConfig{Addr: srv.addr})
			r := req
			r.Masks = masks
			s, err := c.Stream(context.Background(), r)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var images int64
			start(b)
			for b.Loop() {
				rec, err := s.Next(context.Background())
				if err == io.EOF {
					b.Fatal("stream ended")
				}
				if err != nil {
					b.Fatal(err)
				}
				images += rec.NumRows()
				rec.Release()
			}
			report(b, images)
			// Where the server's stream spent its time: waiting for the
			// loader (loader-bound) or handing batches to gRPC (client- or
			// network-bound).
			wall := float64(b.Elapsed())
			b.ReportMetric(100*float64(srv.loaderNanos.Load())/wall, "%loader-wait")
			b.ReportMetric(100*float64(srv.sendNanos.Load())/wall, "%send")
		})
	}
}

// BenchmarkWindowed measures the windowed transport's two CPU steps on a
// prepared batch (32 images at 640², 256 masks of 160²): the server's
// encode (find each window, copy its bytes) and the client's expand, with
// a plain copy of the dense mask stack as the baseline.
func BenchmarkWindowed(b *testing.B) {
	rec := preparedBatch(b, 32, 640, 8)
	defer rec.Release()
	st, _ := batch.MaskStack(rec)
	b.Run("copy-dense-baseline", func(b *testing.B) {
		dst := make([]byte, len(st.Data))
		b.SetBytes(int64(len(st.Data)))
		for b.Loop() {
			copy(dst, st.Data)
		}
	})
	w := newWindower(rec.Schema(), 160, 160, memory.NewGoAllocator())
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(st.Data)))
		for b.Loop() {
			out, err := w.encode(rec)
			if err != nil {
				b.Fatal(err)
			}
			out.Release()
		}
	})
	win, err := w.encode(rec)
	if err != nil {
		b.Fatal(err)
	}
	defer win.Release()
	e, err := newExpander(win.Schema(), bufpool.New(1<<30))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("expand", func(b *testing.B) {
		b.SetBytes(int64(len(st.Data)))
		for b.Loop() {
			out, err := e.expand(win)
			if err != nil {
				b.Fatal(err)
			}
			out.Release()
		}
	})
}
