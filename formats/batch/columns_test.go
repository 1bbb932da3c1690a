package batch

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestColumnsOfInvertsBuild: ColumnsOf of a built record (dense and
// windowed, and both after an IPC round trip) gives back the shared
// columns' bytes, and a record rebuilt from them equals the first.
func TestColumnsOfInvertsBuild(t *testing.T) {
	b, c, _ := sample(t, memory.DefaultAllocator)
	dense, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer dense.Release()
	wb, wc := sampleWindowed(t)
	win, err := wb.BuildWindowed(wc)
	if err != nil {
		t.Fatal(err)
	}
	defer win.Release()
	for name, tc := range map[string]struct {
		b     *Builder
		c     *Columns
		ipc   bool
		dense bool
	}{"dense": {b, c, false, true}, "dense over IPC": {b, c, true, true}, "windowed": {wb, wc, false, false}, "windowed over IPC": {wb, wc, true, false}} {
		rec := win
		if tc.dense {
			rec = dense
		}
		if tc.ipc {
			rec = ipcRoundTrip(t, rec)
			defer rec.Release()
		}
		var got Columns
		if err := ColumnsOf(rec, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.N != tc.c.N || got.SumN != tc.c.SumN {
			t.Fatalf("%s: N %d SumN %d, want %d %d", name, got.N, got.SumN, tc.c.N, tc.c.SumN)
		}
		for col, pair := range map[string][2]*memory.Buffer{
			ColImage: {got.Images, tc.c.Images}, ColImageID: {got.ImageIDs, tc.c.ImageIDs},
			ColOrigHeight: {got.OrigHeight, tc.c.OrigHeight}, ColOrigWidth: {got.OrigWidth, tc.c.OrigWidth},
			ColTransform: {got.Transforms, tc.c.Transforms}, ColBoxesPerImage: {got.BoxesPerImage, tc.c.BoxesPerImage},
			"offsets": {got.Offsets, tc.c.Offsets}, ColBoxes: {got.Boxes, tc.c.Boxes}, ColClasses: {got.Classes, tc.c.Classes},
		} {
			n := pair[1].Len()
			if pair[0].Len() < n || !bytes.Equal(pair[0].Bytes()[:n], pair[1].Bytes()) {
				t.Errorf("%s: column %s read back other bytes", name, col)
			}
		}
		if tc.dense {
			got.Masks = tc.c.Masks
			again, err := tc.b.Build(&got)
			if err != nil {
				t.Fatalf("%s: rebuild: %v", name, err)
			}
			if !again.Schema().Equal(rec.Schema()) || again.NumRows() != rec.NumRows() {
				t.Errorf("%s: rebuilt record differs", name)
			}
			again.Release()
		}
	}
	if err := ColumnsOf(dense.NewSlice(1, 2), &Columns{}); err == nil {
		t.Error("a sliced record was read")
	}
}
