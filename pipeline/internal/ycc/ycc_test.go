package ycc

import (
	"image/color"
	"math/rand/v2"
	"testing"
)

// TestRowMatchesColorModel checks the Go row against color.YCbCrToRGB on
// every input (one row per Y value, all Cb, every third Cr).
func TestRowMatchesColorModel(t *testing.T) {
	var Y, cb, cr []byte
	for c := 0; c < 256; c++ {
		for r := 0; r < 256; r += 3 {
			cb, cr = append(cb, uint8(c)), append(cr, uint8(r))
		}
	}
	Y = make([]byte, len(cb))
	row := make([]byte, 3*len(Y))
	for y := 0; y < 256; y++ {
		for i := range Y {
			Y[i] = uint8(y)
		}
		rowFullGo(row, Y, cb, cr)
		for i := range Y {
			wr, wg, wb := color.YCbCrToRGB(Y[i], cb[i], cr[i])
			if row[3*i] != wr || row[3*i+1] != wg || row[3*i+2] != wb {
				t.Fatalf("(%d,%d,%d): %v, want %d,%d,%d", Y[i], cb[i], cr[i], row[3*i:3*i+3], wr, wg, wb)
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
