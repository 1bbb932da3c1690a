package batch

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// canvasSample is sample's batch on a canvas builder whose live canvas is
// the top-left 4x8 (stride 4).
func canvasSample(t *testing.T) (*Builder, *Columns) {
	t.Helper()
	_, c, _ := sample(t, nil)
	b, err := NewCanvasBuilder(8, 12, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	c.Canvas = bufOf([]int32{4, 8, 4, 8})
	return b, c
}

// TestCanvasColumnRoundTrips: a canvas builder's records end with the
// canvas column (the columns before it are NewBuilder's, in place), which
// LiveCanvas reads back after IPC, after the windowed form and its
// rebuild through ColumnsOf; a plain builder's records have none.
func TestCanvasColumnRoundTrips(t *testing.T) {
	b, c := canvasSample(t)
	plain, _, _ := sample(t, nil)
	n := plain.Schema().NumFields()
	if got := b.Schema().NumFields(); got != n+1 || b.Schema().Field(n).Name != ColCanvas || !HasCanvas(b.Schema()) || HasCanvas(plain.Schema()) {
		t.Fatalf("schema %s", b.Schema())
	}
	for i := 0; i < n; i++ {
		if !b.Schema().Field(i).Equal(plain.Schema().Field(i)) {
			t.Fatalf("field %d: %s, want %s", i, b.Schema().Field(i), plain.Schema().Field(i))
		}
	}
	rec, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	back := ipcRoundTrip(t, rec)
	defer back.Release()
	win, err := Windowed(b.WindowedSchema(), rec, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer win.Release()
	if !win.Schema().Equal(b.WindowedSchema()) || win.Schema().Field(win.Schema().NumFields()-1).Name != ColCanvas {
		t.Fatalf("windowed schema %s", win.Schema())
	}
	var wc Columns
	if err := ColumnsOf(win, &wc); err != nil {
		t.Fatal(err)
	}
	if wc.Canvas == nil || !slices.Equal(arrow.Int32Traits.CastFromBytes(wc.Canvas.Bytes())[:4], []int32{4, 8, 4, 8}) {
		t.Fatal("ColumnsOf left out the canvas")
	}
	for i, r := range []arrow.RecordBatch{rec, back, win} {
		h, w, ok, err := LiveCanvas(r)
		if err != nil || !ok || h != 4 || w != 8 {
			t.Fatalf("record %d: live canvas %dx%d %v %v", i, h, w, ok, err)
		}
	}
	prec, err := plain.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer prec.Release()
	if h, w, ok, err := LiveCanvas(prec); err != nil || ok || h != 8 || w != 12 {
		t.Fatalf("plain record: live canvas %dx%d %v %v", h, w, ok, err)
	}
}

// TestBuildRefusesABadCanvas: a consumer slices by the live canvas, so
// one it cannot slice by is refused, as is a missing column or rows that
// disagree.
func TestBuildRefusesABadCanvas(t *testing.T) {
	for name, hw := range map[string][]int32{
		"missing":        nil,
		"larger":         {12, 8, 12, 8},
		"off the grid":   {4, 6, 4, 6},
		"empty":          {0, 8, 0, 8},
		"negative":       {-4, 8, -4, 8},
		"rows disagree":  {4, 8, 8, 8},
		"short of a row": {4, 8},
	} {
		b, c := canvasSample(t)
		c.Canvas = nil
		if hw != nil {
			c.Canvas = bufOf(hw)
		}
		rec, err := b.Build(c)
		if err == nil {
			_, _, _, err = LiveCanvas(rec)
			rec.Release()
		}
		if err == nil {
			t.Errorf("%s canvas %v accepted", name, hw)
		}
	}
}
