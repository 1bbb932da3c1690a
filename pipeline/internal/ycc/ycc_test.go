package ycc

import (
	"image/color"
	"math/rand/v2"
	"testing"
)

// TestPixelMatchesColorModel checks Pixel against color.YCbCrToRGB on
// every input.
func TestPixelMatchesColorModel(t *testing.T) {
	for y := 0; y < 256; y++ {
		for cb := 0; cb < 256; cb++ {
			for cr := 0; cr < 256; cr += 3 {
				r, g, b := Pixel(uint8(y), uint8(cb), uint8(cr))
				wr, wg, wb := color.YCbCrToRGB(uint8(y), uint8(cb), uint8(cr))
				if r != wr || g != wg || b != wb {
					t.Fatalf("(%d,%d,%d): %d,%d,%d, want %d,%d,%d", y, cb, cr, r, g, b, wr, wg, wb)
				}
			}
		}
	}
}

// TestRowKernelsMatchGo: the dispatched rows (vector kernel plus Go
// tail) give the Go rows' bytes for random rows of every length up to 300,
// extremes included.
func TestRowKernelsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	val := func() uint8 {
		switch r.IntN(4) {
		case 0:
			return uint8(255 * r.IntN(2))
		default:
			return uint8(r.IntN(256))
		}
	}
	for n := 0; n <= 300; n++ {
		Y, cb, cr := make([]byte, n), make([]byte, n), make([]byte, n)
		for i := range Y {
			Y[i], cb[i], cr[i] = val(), val(), val()
		}
		got, want := make([]byte, 3*n), make([]byte, 3*n)
		RowFull(got, Y, cb, cr)
		rowFullGo(want, Y, cb, cr)
		if string(got) != string(want) {
			t.Fatalf("full n %d: kernel %v, Go %v", n, got, want)
		}
		h := (n + 1) / 2
		RowHalf(got, Y, cb[:h], cr[:h])
		rowHalfGo(want, Y, cb[:h], cr[:h])
		if string(got) != string(want) {
			t.Fatalf("half n %d: kernel %v, Go %v", n, got, want)
		}
	}
}

// BenchmarkRow converts one 640-pixel 4:4:4 row with the dispatched
// kernel and, as the same-run baseline, the Go row.
func BenchmarkRow(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n = 640
	Y, cb, cr, dst := make([]byte, n), make([]byte, n), make([]byte, n), make([]byte, 3*n)
	for i := range Y {
		Y[i], cb[i], cr[i] = uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256))
	}
	for _, k := range []struct {
		name string
		goK  bool
	}{{"kernel", false}, {"go", true}} {
		b.Run(k.name, func(b *testing.B) {
			forceGo = k.goK
			defer func() { forceGo = false }()
			b.SetBytes(n)
			for b.Loop() {
				RowFull(dst, Y, cb, cr)
			}
		})
	}
}
