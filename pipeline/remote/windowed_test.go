package remote

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// TestWindowedRoundTrip encodes random batches, empty masks and images
// without instances included, and expands them back.
func TestWindowedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 20; trial++ {
		n := 1 + rng.IntN(5)
		bpi := make([]int32, n)
		sumN := 0
		for i := range bpi {
			bpi[i] = int32(rng.IntN(4))
			sumN += int(bpi[i])
		}
		rec := randomBatch(t, rng, bpi, 16, 4)
		w := newWindower(rec.Schema(), 4, 4, memory.NewGoAllocator())
		win, err := w.encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		e, err := newExpander(win.Schema(), memory.NewGoAllocator())
		if err != nil {
			t.Fatal(err)
		}
		back, err := e.expand(win)
		if err != nil {
			t.Fatal(err)
		}
		sameBatches(t, []arrow.RecordBatch{rec}, []arrow.RecordBatch{back})
		rec.Release()
		win.Release()
		back.Release()
	}
}

func randomBatch(t *testing.T, rng *rand.Rand, bpi []int32, s, hp int) arrow.RecordBatch {
	t.Helper()
	b, err := batch.NewBuilder(s, s, hp, hp)
	if err != nil {
		t.Fatal(err)
	}
	n := len(bpi)
	offs := make([]int32, n+1)
	for i, k := range bpi {
		offs[i+1] = offs[i] + k
	}
	sumN := int(offs[n])
	bytesOf := func(size int) []byte {
		out := make([]byte, size)
		for i := range out {
			out[i] = byte(rng.Uint32())
		}
		return out
	}
	masks := make([]byte, sumN*hp*hp)
	for i := range masks {
		if rng.IntN(5) == 0 {
			masks[i] = 1
		}
	}
	crowd := make([]byte, sumN)
	for i := range crowd {
		if rng.IntN(4) == 0 {
			crowd[i] = 1
		}
	}
	buf := memory.NewBufferBytes
	rec, err := b.Build(&batch.Columns{IsCrowd: buf(crowd), N: n, SumN: sumN, Images: buf(bytesOf(3 * s * s * n)), ImageIDs: buf(bytesOf(8 * n)),
		OrigHeight: buf(bytesOf(4 * n)), OrigWidth: buf(bytesOf(4 * n)), Transforms: buf(make([]byte, 48*n)),
		BoxesPerImage: buf(arrow.Int32Traits.CastToBytes(bpi)), Offsets: buf(arrow.Int32Traits.CastToBytes(offs)),
		Boxes: buf(make([]byte, 16*sumN)), Classes: buf(make([]byte, 4*sumN)), Masks: buf(masks)})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestExpandRejectsBadWindows(t *testing.T) {
	rec := randomBatch(t, rand.New(rand.NewPCG(1, 1)), []int32{2}, 16, 4)
	defer rec.Release()
	w := newWindower(rec.Schema(), 4, 4, memory.NewGoAllocator())
	win, err := w.encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer win.Release()
	// Corrupt the first window so that it leaves the grid.
	wins := win.Column(nDense).Data().Children()[0].Children()[0].Buffers()[1].Bytes()
	copy(wins, arrow.Int32Traits.CastToBytes([]int32{3, 3, 4, 4}))
	e, _ := newExpander(win.Schema(), memory.NewGoAllocator())
	if _, err := e.expand(win); err == nil {
		t.Fatal("a window outside the grid expanded without error")
	}
}

// TestWindowedBytesCocoTiny measures wire bytes per batch, dense against
// windowed, on coco-tiny mosaic batches (batch 32, imgsz 640, stride 4).
// It checks the round trip; the figures are logged for BENCHMARKS.
func TestWindowedBytesCocoTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("loader on coco-tiny at 640: a few seconds")
	}
	rows, _ := cocoTinyRows(t)
	req := Request{Shards: "coco", BatchSize: 32, ImgSz: 640, Limit: 3, Start: order.State{Seed: 1}}
	cfg, err := req.Config(pipeline.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := pipeline.New(context.Background(), &pipeline.SliceSource{Rows: rows, BlockSize: 16}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var dense, windowed, masksDense, masksWin int64
	for i := 0; i < 3; i++ {
		rec, err := l.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w := newWindower(rec.Schema(), 160, 160, memory.NewGoAllocator())
		win, err := w.encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := newExpander(win.Schema(), memory.NewGoAllocator())
		back, err := e.expand(win)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := batch.MaskStack(rec)
		b, _ := batch.MaskStack(back)
		if !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("batch %d: expanded masks differ", i)
		}
		dense += bodyBytes(rec)
		windowed += bodyBytes(win)
		masksDense += dataBytes(rec.Column(nDense).Data())
		masksWin += dataBytes(win.Column(nDense).Data()) + dataBytes(win.Column(nDense+1).Data())
		rec.Release()
		win.Release()
		back.Release()
	}
	t.Logf("coco-tiny mosaic, 3 batches of 32 at 640: mask bytes/batch dense %.0f, windowed %.0f (%.1f× fewer); whole batch %.0f vs %.0f (%.2f× fewer)",
		float64(masksDense)/3, float64(masksWin)/3, float64(masksDense)/float64(masksWin),
		float64(dense)/3, float64(windowed)/3, float64(dense)/float64(windowed))
}

// TestWindowedDeliveryExpandsLikeDense: a stream that delivers its batches
// windowed (OpenWindowed's) gives records of the windowed schema whose
// first nine columns are the dense stream's and whose windows, read with
// batch.MaskWindowsOf and expanded with raster.Expand, are the dense
// stream's mask stack byte for byte.
func TestWindowedDeliveryExpandsLikeDense(t *testing.T) {
	rows := synthRows(t, 12)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	req := testRequest()
	req.Masks = MasksWindowed
	ctx := context.Background()
	dense, err := c.Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := drain(t, dense)
	defer release(want)
	dense.Close()
	kept, err := c.stream(ctx, req, true)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, kept)
	defer release(got)
	kept.Close()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d windowed batches, %d dense", len(got), len(want))
	}
	for i := range want {
		if !batch.IsWindowed(got[i].Schema()) {
			t.Fatalf("batch %d: schema %s", i, got[i].Schema())
		}
		for col := 0; col < nDense; col++ {
			if !array.Equal(got[i].Column(col), want[i].Column(col)) {
				t.Fatalf("batch %d: column %s differs", i, want[i].Schema().Field(col).Name)
			}
		}
		mw, err := batch.MaskWindowsOf(got[i])
		if err != nil {
			t.Fatal(err)
		}
		ms, err := batch.MaskStack(want[i])
		if err != nil {
			t.Fatal(err)
		}
		wins, err := raster.WindowsOf(mw.Windows)
		if err != nil {
			t.Fatal(err)
		}
		stack := make([]byte, mw.Count()*mw.Rows*mw.Cols)
		if err := raster.Expand(stack, raster.Grid{Rows: mw.Rows, Cols: mw.Cols, Stride: 4}, wins, mw.Data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stack, ms.Data) {
			t.Fatalf("batch %d: the windows expand to another stack than the dense stream's", i)
		}
	}
}

// TestExpandedStacksAreRecycled streams windowed batches with the client's
// default allocator, releasing each before the next, and checks that the
// dense stacks after the first few reuse released ones: a fresh stack is
// cleared by the runtime and faulted in before the expansion clears it
// again.
func TestExpandedStacksAreRecycled(t *testing.T) {
	rows := synthRows(t, 24)
	srv := startServer(t, rows, ServerConfig{})
	c := client(t, ClientConfig{Addr: srv.addr})
	req := testRequest()
	req.Masks = MasksWindowed
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	for {
		rec, err := s.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := batch.MaskStack(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		n++
	}
	allocs, reuses := c.recv.Counts()
	// The pool also serves the bodies that could not be used where they
	// were read; every other buffer it handed out is a stack.
	bodies := int64(n) - c.arena.inPlace.Load()
	if stacks := allocs + reuses - bodies; n < 8 || stacks != int64(n) {
		t.Errorf("%d batches expanded, %d stacks from the client's pool; want every one", n, stacks)
	}
	// Stacks and bodies vary in size with the instances a batch holds:
	// each power-of-two size class is allocated about once.
	if allocs > 6 {
		t.Errorf("%d buffers allocated for %d batches (%d reused), want the released ones reused", allocs, n, reuses)
	}
}
