package batch

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bruteWindow is the reference: the bounding box of the non-zero cells by
// testing every cell.
func bruteWindow(p []byte, rows, cols int) (x0, y0, w, h int) {
	x0, y0, x1, y1 := cols, rows, -1, -1
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if p[r*cols+c] != 0 {
				x0, y0, x1, y1 = min(x0, c), min(y0, r), max(x1, c), max(y1, r)
			}
		}
	}
	if x1 < 0 {
		return 0, 0, 0, 0
	}
	return x0, y0, x1 - x0 + 1, y1 - y0 + 1
}

func TestTightWindowMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		rows, cols := 1+rng.IntN(70), 1+rng.IntN(70)
		p := make([]byte, rows*cols)
		for k := rng.IntN(6); k > 0; k-- {
			p[rng.IntN(len(p))] = 1
		}
		x, y, w, h := tightWindow(p, rows, cols)
		bx, by, bw, bh := bruteWindow(p, rows, cols)
		if x != bx || y != by || w != bw || h != bh {
			t.Fatalf("%dx%d plane: (%d,%d,%d,%d), brute force (%d,%d,%d,%d)", rows, cols, x, y, w, h, bx, by, bw, bh)
		}
	}
}

// TestWindowedTakesEveryBufferFromMem: what Windowed adds to a dense
// record (windows, data offsets, data) comes from the allocator it is
// given and goes back to it when the result is released; the result is
// the one BuildWindowed makes of the known windows, also for a batch
// without instances or without ON cells.
func TestWindowedTakesEveryBufferFromMem(t *testing.T) {
	tests := []struct {
		name  string
		masks []byte // 2x3 planes of the sample's 3 instances
		// wins and data are the expected windowed form.
		wins []int32
		offs []int32
		data []byte
	}{
		{"sample", []byte{1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
			[]int32{0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 2, 1}, []int32{0, 6, 14}, []byte{1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
		{"one cell each", []byte{0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
			[]int32{2, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1}, []int32{0, 1, 3}, []byte{1, 1, 1}},
		{"no ON cell", make([]byte, 18), make([]int32, 12), []int32{0, 0, 0}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, c, _ := sample(t, nil)
			c.Masks = bufOf(tc.masks)
			dense, err := b.Build(c)
			if err != nil {
				t.Fatal(err)
			}
			defer dense.Release()
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			got, err := Windowed(b.WindowedSchema(), dense, mem)
			if err != nil {
				t.Fatal(err)
			}
			if mem.CurrentAlloc() == 0 {
				t.Fatal("nothing allocated from mem")
			}
			m, err := MaskWindowsOf(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Data) > 0 {
				in := false
				for _, buf := range got.Column(nDense + 1).Data().Buffers()[1:] {
					in = in || (buf != nil && buf.Len() > 0 && &buf.Bytes()[0] == &m.Data[0])
				}
				if !in {
					t.Fatal("data not in the record's own buffer")
				}
			}
			w := &Columns{Windows: bufOf(tc.wins), WindowOffsets: bufOf(tc.offs), WindowData: bufOf(tc.data)}
			*w = Columns{N: c.N, SumN: c.SumN, Images: c.Images, ImageIDs: c.ImageIDs, OrigHeight: c.OrigHeight,
				OrigWidth: c.OrigWidth, Transforms: c.Transforms, BoxesPerImage: c.BoxesPerImage, Offsets: c.Offsets,
				Boxes: c.Boxes, Classes: c.Classes, Windows: w.Windows, WindowOffsets: w.WindowOffsets, WindowData: w.WindowData}
			want, err := b.BuildWindowed(w)
			if err != nil {
				t.Fatal(err)
			}
			defer want.Release()
			if !array.RecordEqual(got, want) {
				t.Errorf("Windowed %v\nwant %v", got, want)
			}
			got.Release()
			mem.AssertSize(t, 0)
		})
	}
}
