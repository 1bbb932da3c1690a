package preview

import (
	"image/color"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/batch"
)

// record builds a batch of one 32×32 gray image (grid 8×8) with two
// instances: a 3×2 block and a 2×2 block that overlaps it in one cell.
func record(t *testing.T) arrow.RecordBatch {
	t.Helper()
	b, err := batch.NewBuilder(32, 32, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	buf := func(bs []byte) *memory.Buffer { return memory.NewBufferBytes(bs) }
	img := make([]byte, 3*32*32)
	for i := range img {
		img[i] = 100
	}
	masks := make([]byte, 2*64)
	for r := 1; r < 3; r++ {
		for c := 1; c < 4; c++ {
			masks[r*8+c] = 1
		}
	}
	for r := 2; r < 4; r++ {
		for c := 3; c < 5; c++ {
			masks[64+r*8+c] = 1
		}
	}
	f32 := func(v ...float32) []byte { return arrow.Float32Traits.CastToBytes(v) }
	i32 := func(v ...int32) []byte { return arrow.Int32Traits.CastToBytes(v) }
	rec, err := b.Build(&batch.Columns{
		N: 1, SumN: 2, Images: buf(img), ImageIDs: buf(arrow.Int64Traits.CastToBytes([]int64{7})),
		OrigHeight: buf(i32(32)), OrigWidth: buf(i32(32)), Transforms: buf(arrow.Float64Traits.CastToBytes([]float64{1, 0, 0, 0, 1, 0})),
		BoxesPerImage: buf(i32(2)), Offsets: buf(i32(0, 2)), Boxes: buf(f32(4, 4, 16, 12, 12, 8, 20, 16)), Classes: buf(i32(0, 1)), Masks: buf(masks),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestGridSheetShowsEveryCell(t *testing.T) {
	rec := record(t)
	defer rec.Release()
	const tile = 80 // 10 px a cell
	im, err := GridSheet(rec, Options{Tile: tile})
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := batch.MaskStack(rec)
	for r := 0; r < 8; r++ {
		for c := 0; c < 8; c++ {
			a, b := ms.At(0)[r*8+c], ms.At(1)[r*8+c]
			got := im.RGBAAt(pad+c*10+5, pad+r*10+5)
			var want color.RGBA
			switch {
			case a == 1 && b == 1:
				want = color.RGBA{255, 255, 255, 255}
			case a == 1:
				want = palette[0]
			case b == 1:
				want = palette[1]
			default:
				if got == palette[0] || got == palette[1] || got == (color.RGBA{255, 255, 255, 255}) {
					t.Errorf("cell (%d,%d) is empty but drawn %v", r, c, got)
				}
				continue
			}
			if r*10+5 > tile-20 { // the caption band covers the bottom rows
				continue
			}
			if got != want {
				t.Errorf("cell (%d,%d): %v, want %v", r, c, got, want)
			}
		}
	}
}

func TestSheetOverlaysMasksOnly(t *testing.T) {
	rec := record(t)
	defer rec.Release()
	im, err := Sheet(rec, Options{Tile: 256, Alpha: 0.5}) // 8 tile px per canvas px, 32 per cell
	if err != nil {
		t.Fatal(err)
	}
	// Inside instance 0 (cell (1,1)..(2,3)), away from outlines, box and label: blended.
	blend := func(c uint8) uint8 { return uint8(0.5*100 + 0.5*float64(c)) }
	got := im.RGBAAt(pad+80, pad+80) // cell (2,2)
	want := color.RGBA{blend(palette[0].R), blend(palette[0].G), blend(palette[0].B), 255}
	if got != want {
		t.Errorf("inside the mask: %v, want %v", got, want)
	}
	// Far from every instance: the image itself.
	if got := im.RGBAAt(pad+220, pad+40); got != (color.RGBA{100, 100, 100, 255}) {
		t.Errorf("outside the masks: %v, want the image gray", got)
	}
}
