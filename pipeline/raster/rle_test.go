package raster

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/pipeline/geom"
)

// encodeRLE builds COCO column-major counts from a row-major bitmap.
func encodeRLE(h, w int, bitmap []uint8) RLE {
	var counts []uint32
	cur, n := uint8(0), uint32(0)
	for x := 0; x < w; x++ {
		for y := 0; y < h; y++ {
			if v := bitmap[y*w+x]; v != cur {
				counts = append(counts, n)
				cur, n = v, 0
			}
			n++
		}
	}
	counts = append(counts, n)
	return RLE{H: h, W: w, Counts: counts}
}

// bruteRLE applies the documented crowd rule to every cell.
func bruteRLE(g Grid, h, w int, bitmap []uint8, m geom.Affine) []uint8 {
	inv, _ := m.Invert()
	out := make([]uint8, g.Cells())
	s := float64(g.Stride)
	for r := 0; r < g.Rows; r++ {
		for c := 0; c < g.Cols; c++ {
			x, y := inv.Apply((float64(c)+0.5)*s, (float64(r)+0.5)*s)
			fx, fy := math.Floor(x), math.Floor(y)
			if fx >= 0 && fx < float64(w) && fy >= 0 && fy < float64(h) {
				out[r*g.Cols+c] = bitmap[int(fy)*w+int(fx)]
			}
		}
	}
	return out
}

func TestRLEMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var z Rasterizer
	for i := 0; i < 3000; i++ {
		h, w := 1+rng.IntN(40), 1+rng.IntN(40)
		bitmap := make([]uint8, h*w)
		switch rng.IntN(4) {
		case 0: // noise
			for j := range bitmap {
				bitmap[j] = uint8(rng.IntN(2))
			}
		case 1: // empty
		default: // a few rectangles
			for k := 0; k < 1+rng.IntN(3); k++ {
				x0, y0 := rng.IntN(w), rng.IntN(h)
				x1, y1 := x0+1+rng.IntN(w-x0), y0+1+rng.IntN(h-y0)
				for y := y0; y < y1; y++ {
					for x := x0; x < x1; x++ {
						bitmap[y*w+x] = 1
					}
				}
			}
		}
		rle := encodeRLE(h, w, bitmap)
		g := genGrid(rng)
		sc := math.Exp(rng.Float64()*4 - 2)
		m := geom.Translate(rng.Float64()*80-20, rng.Float64()*80-20).
			Mul(geom.Scale(sc*float64(1-2*rng.IntN(2)), sc*(0.5+rng.Float64())))
		if rng.IntN(3) == 0 {
			m = m.Mul(geom.Rotate(rng.Float64() * 2 * math.Pi))
		}
		if rng.IntN(4) == 0 { // integer scale and offset: centres land on pixel borders
			m = geom.Translate(float64(rng.IntN(9)-4), float64(rng.IntN(9)-4)).Mul(geom.Scale(float64(1+rng.IntN(4)), float64(1+rng.IntN(4))))
		}
		want := bruteRLE(g, h, w, bitmap, m)
		got := bytes.Repeat([]byte{3}, g.Cells())
		if err := z.DenseRLE(got, g, rle, m); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: grid %+v rle %dx%d affine %v\n%s", i, g, h, w, m, diffPicture(g, got, want))
		}
		wins, data, err := z.AppendWindowRLE(nil, nil, g, rle, m)
		if err != nil {
			t.Fatal(err)
		}
		ww, wb := tightWindow(g, want)
		if wins[0] != ww || !bytes.Equal(data, wb) {
			t.Fatalf("case %d: window %+v want %+v", i, wins[0], ww)
		}
	}
}

func TestRLEErrors(t *testing.T) {
	var z Rasterizer
	g := Grid{Rows: 4, Cols: 4, Stride: 1}
	dst := make([]uint8, 16)
	if err := z.DenseRLE(dst, g, RLE{H: 2, W: 2, Counts: []uint32{1, 2}}, geom.Identity()); err == nil {
		t.Error("counts summing below h*w accepted")
	}
	if err := z.DenseRLE(dst, g, RLE{H: 2, W: 2, Counts: []uint32{1, 2, 3}}, geom.Identity()); err == nil {
		t.Error("counts summing above h*w accepted")
	}
	if err := z.DenseRLE(dst, g, RLE{H: 2, W: 2, Counts: []uint32{0, 4}}, geom.Scale(0, 1)); err == nil {
		t.Error("singular affine accepted")
	}
	if err := z.DenseRLE(dst, g, RLE{H: -1, W: 2}, geom.Identity()); err == nil {
		t.Error("negative size accepted")
	}
	if err := z.DenseRLE(dst, g, RLE{}, geom.Identity()); err != nil || bytes.Count(dst, []byte{1}) != 0 {
		t.Errorf("empty rle: %v", err)
	}
}

func TestRLESteadyStateAllocatesNothing(t *testing.T) {
	h, w := 480, 640
	bitmap := make([]uint8, h*w)
	for y := 100; y < 300; y++ {
		for x := 50 + y%7; x < 400; x++ {
			bitmap[y*w+x] = 1
		}
	}
	rle := encodeRLE(h, w, bitmap)
	g := Grid{Rows: 160, Cols: 160, Stride: 4}
	m := geom.Translate(0, 80)
	var z Rasterizer
	dst := make([]uint8, g.Cells())
	if a := testing.AllocsPerRun(5, func() { _ = z.DenseRLE(dst, g, rle, m) }); a != 0 {
		t.Fatalf("%v allocations per run", a)
	}
	if want := bruteRLE(g, h, w, bitmap, m); !bytes.Equal(dst, want) {
		t.Fatal("differs from the oracle")
	}
}

// FuzzRasterizeRLE compares DenseRLE and AppendWindowRLE with the oracle
// for bitmaps and placements decoded from the fuzz input.
func FuzzRasterizeRLE(f *testing.F) {
	f.Add([]byte{0xff, 0x0f, 0xf0, 0x00}, uint8(4), uint8(8), 1.5, 0.25, 3.0, -2.0, 0.0)
	f.Add([]byte{0xaa, 0x55}, uint8(3), uint8(5), -2.0, 0.5, 40.0, 7.0, 0.7)
	var z Rasterizer
	f.Fuzz(func(t *testing.T, bits []byte, h, w uint8, sx, sy, tx, ty, theta float64) {
		H, W := int(h%24), int(w%24)
		bitmap := make([]uint8, H*W)
		for i := range bitmap {
			if i/8 < len(bits) {
				bitmap[i] = bits[i/8] >> (i % 8) & 1
			}
		}
		m := geom.Translate(tx, ty).Mul(geom.Rotate(theta)).Mul(geom.Scale(sx, sy))
		if _, ok := m.Invert(); !ok {
			if err := z.DenseRLE(make([]uint8, 16), Grid{Rows: 4, Cols: 4, Stride: 1}, encodeRLE(H, W, bitmap), m); err == nil {
				t.Fatal("singular affine accepted")
			}
			return
		}
		g := Grid{Rows: 1 + int(h)%20, Cols: 1 + int(w)%20, Stride: 1 + int(h^w)%4}
		rle := encodeRLE(H, W, bitmap)
		want := bruteRLE(g, H, W, bitmap, m)
		got := make([]uint8, g.Cells())
		if err := z.DenseRLE(got, g, rle, m); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("grid %+v rle %dx%d affine %v\n%s", g, H, W, m, diffPicture(g, got, want))
		}
		wins, data, err := z.AppendWindowRLE(nil, nil, g, rle, m)
		if err != nil {
			t.Fatal(err)
		}
		ww, wb := tightWindow(g, want)
		if wins[0] != ww || !bytes.Equal(data, wb) {
			t.Fatalf("window %+v want %+v", wins[0], ww)
		}
	})
}
