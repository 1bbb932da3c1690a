package remote

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// synthRows makes n small JPEGs, each with a quadrilateral and a triangle
// annotated as polygons (class 1 and 2).
func synthRows(t testing.TB, n int) []shard.Image {
	t.Helper()
	rows := make([]shard.Image, n)
	for i := range rows {
		w, h := 64+8*(i%3), 48+8*(i%2)
		im := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				im.Set(x, y, color.RGBA{uint8(20 + 3*i%60 + x), uint8(30 + 7*i%50 + y), uint8(90 + i%40), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, im, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		quad := []float32{float32(4 + i%7), 6, float32(w - 10), 4, float32(w - 6), float32(h/2 + 3), 8, float32(h / 2)}
		tri := []float32{float32(w / 3), float32(h - 4), float32(w - 4), float32(h/2 + 6), float32(w - 8), float32(h - 3)}
		rows[i] = shard.Image{
			ImageID: int64(1000 + i), Width: int32(w), Height: int32(h), Format: "jpeg", Bytes: buf.Bytes(),
			Instances: []shard.Instance{
				{AnnID: int64(i), Class: 1, Polygons: [][]float32{quad}},
				{AnnID: int64(i) + 5000, Class: 2, Polygons: [][]float32{tri}},
			},
		}
	}
	return rows
}

type testServer struct {
	*Server
	addr string
}

// startServer serves rows as the shard set "synth" on a loopback port.
func startServer(t testing.TB, rows []shard.Image, cfg ServerConfig) *testServer {
	t.Helper()
	if cfg.Open == nil && cfg.Root == "" {
		cfg.Open = func(_ context.Context, name string) (pipeline.Source, error) {
			if name != "synth" {
				return nil, &notFound{name}
			}
			return &pipeline.SliceSource{Rows: rows, BlockSize: 8}, nil
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Loader.Workers == 0 {
		cfg.Loader.Workers = 2
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return &testServer{Server: s, addr: lis.Addr().String()}
}

type notFound struct{ name string }

func (e *notFound) Error() string { return "shard set " + e.name + " not found" }
func (e *notFound) Unwrap() error { return os.ErrNotExist }

func client(t testing.TB, cfg ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testRequest() Request {
	a := augment.DefaultConfig()
	a.Degrees = 5
	return Request{
		Version: RequestVersion, Shards: "synth", Start: order.State{Seed: 7}, Epochs: 2, CloseMosaic: 1,
		BatchSize: 4, ImgSz: 64, Augment: &a,
	}
}

// local runs the in-process loader on the same request.
func local(t testing.TB, rows []shard.Image, req Request, workers int) []arrow.RecordBatch {
	t.Helper()
	cfg, err := req.Config(pipeline.Config{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	l, err := pipeline.New(context.Background(), &pipeline.SliceSource{Rows: rows, BlockSize: 8}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out []arrow.RecordBatch
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
		if req.Limit > 0 && int64(len(out)) == req.Limit {
			break
		}
	}
	return out
}

func drain(t testing.TB, b pipeline.Batches) []arrow.RecordBatch {
	t.Helper()
	var out []arrow.RecordBatch
	for {
		rec, err := b.Next(context.Background())
		if err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("after %d batches: %v", len(out), err)
		}
		out = append(out, rec)
	}
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// sameBatches checks schema equality and byte equality of every column.
func sameBatches(t testing.TB, want, got []arrow.RecordBatch) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if !w.Schema().Equal(g.Schema()) || w.Schema().Metadata().String() != g.Schema().Metadata().String() {
			t.Fatalf("batch %d: schema\n%v\nwant\n%v", i, g.Schema(), w.Schema())
		}
		if !array.RecordEqual(w, g) {
			t.Fatalf("batch %d: records differ", i)
		}
		wi, _ := batch.ImageTensor(w)
		gi, _ := batch.ImageTensor(g)
		wm, _ := batch.MaskStack(w)
		gm, _ := batch.MaskStack(g)
		if !bytes.Equal(wi.Data, gi.Data) || !bytes.Equal(wm.Data, gm.Data) || wm.Count != gm.Count {
			t.Fatalf("batch %d: image or mask bytes differ", i)
		}
	}
}

func eventually(t testing.TB, what string, d time.Duration, ok func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			for _, st := range state {
				what += " (" + st() + ")"
			}
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pipelineConfig(workers int) pipeline.Config {
	return pipeline.Config{Workers: workers, Prefetch: 2}
}
