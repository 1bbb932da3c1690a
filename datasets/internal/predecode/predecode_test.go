package predecode

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/formats/shard"
)

// areaRef is the brute-force area average: the whole 2-D overlap of every
// source pixel with the stored pixel, in the same integer units.
func areaRef(src []byte, w, h, nw, nh int) []byte {
	out := make([]byte, 3*nw*nh)
	ov := func(i, j, n, m int) int { // stored i (n wide), source j (m wide)
		return max(0, min((i+1)*n, (j+1)*m)-max(i*n, j*m))
	}
	for r := 0; r < nh; r++ {
		for i := 0; i < nw; i++ {
			for c := 0; c < 3; c++ {
				var s uint64
				for y := 0; y < h; y++ {
					for x := 0; x < w; x++ {
						s += uint64(ov(i, x, w, nw)) * uint64(ov(r, y, h, nh)) * uint64(src[3*(y*w+x)+c])
					}
				}
				d := uint64(w * h)
				out[3*(r*nw+i)+c] = uint8((s + d/2) / d)
			}
		}
	}
	return out
}

func TestResizeIsTheExactAreaAverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var z Resizer
	var dst []byte
	for trial := 0; trial < 300; trial++ {
		w, h := 1+rng.IntN(23), 1+rng.IntN(23)
		nw, nh := 1+rng.IntN(w), 1+rng.IntN(h)
		src := make([]byte, 3*w*h)
		for i := range src {
			src[i] = uint8(rng.IntN(256))
		}
		if trial%7 == 0 { // extremes: rounding at the top of the range
			for i := range src {
				src[i] = 255
			}
		}
		dst = z.Resize(dst, src, w, h, nw, nh)
		if want := areaRef(src, w, h, nw, nh); !bytes.Equal(dst, want) {
			t.Fatalf("%dx%d -> %dx%d: got %v want %v", w, h, nw, nh, dst, want)
		}
	}
}

func TestResizeKeepsTheSizeAsACopy(t *testing.T) {
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	var z Resizer
	if got := z.Resize(nil, src, 2, 2, 2, 2); !bytes.Equal(got, src) {
		t.Errorf("same size: %v", got)
	}
	// Halving is the rounded mean of 2x2 blocks.
	if got := z.Resize(nil, src, 2, 2, 1, 1); !bytes.Equal(got, []byte{6, 7, 8}) {
		t.Errorf("halved: %v", got)
	}
}

func TestStoredSize(t *testing.T) {
	for _, c := range []struct{ w, h, n, ww, wh int32 }{
		{640, 480, 0, 640, 480},
		{640, 480, 640, 640, 480},
		{640, 480, 1000, 640, 480}, // never upscaled
		{640, 480, 320, 320, 240},
		{480, 640, 320, 240, 320},
		{1000, 3, 10, 10, 1}, // at least one pixel
		{333, 500, 100, 67, 100},
	} {
		w, h := shard.StoredSize(c.w, c.h, int(c.n))
		if w != c.ww || h != c.wh {
			t.Errorf("StoredSize(%d, %d, %d) = %dx%d, want %dx%d", c.w, c.h, c.n, w, h, c.ww, c.wh)
		}
	}
}

func testImage(w, h int) *image.RGBA {
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			im.Set(x, y, color.RGBA{uint8(x * 7), uint8(y * 5), uint8(x ^ y), 255})
		}
	}
	return im
}

func TestConvertStoresTheDecodedPixels(t *testing.T) {
	var jb, pb bytes.Buffer
	im := testImage(40, 30)
	if err := jpeg.Encode(&jb, im, nil); err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(&pb, im); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{shard.FormatRaw, shard.FormatZstd} {
		for _, src := range []struct {
			format string
			b      []byte
		}{{"jpeg", jb.Bytes()}, {"png", pb.Bytes()}} {
			dec, _, err := image.Decode(bytes.NewReader(src.b))
			if err != nil {
				t.Fatal(err)
			}
			want := toRGB(nil, dec)
			c := Converter{Pixels: shard.Pixels{Encoding: enc}}
			img := &shard.Image{ImageID: 1, Width: 40, Height: 30, Format: src.format, Bytes: src.b}
			if err := c.Convert(img); err != nil {
				t.Fatal(err)
			}
			if img.Format != enc || img.Width != 40 || img.SourceWidth != 40 || img.SourceHeight != 30 {
				t.Fatalf("%s from %s: row %+v", enc, src.format, img)
			}
			got, err := shard.DecodePixels(img.Format, img.Width, img.Height, img.Bytes, nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s from %s: pixels differ (%v)", enc, src.format, err)
			}
			// The PNG is lossless: the stored pixels are the source's.
			if src.format == "png" {
				for i := 0; i < 40*30; i++ {
					if got[3*i] != im.Pix[4*i] || got[3*i+1] != im.Pix[4*i+1] || got[3*i+2] != im.Pix[4*i+2] {
						t.Fatalf("pixel %d differs from the source", i)
					}
				}
			}
		}
	}
}

func TestConvertResizesAndScalesAnnotations(t *testing.T) {
	var pb bytes.Buffer
	if err := png.Encode(&pb, testImage(40, 30)); err != nil {
		t.Fatal(err)
	}
	// A crowd mask: the left half of the image.
	mask := make([]byte, 40*30)
	for y := 0; y < 30; y++ {
		for x := 0; x < 20; x++ {
			mask[y*40+x] = 1
		}
	}
	m, err := rle.FromMask(mask, 30, 40)
	if err != nil {
		t.Fatal(err)
	}
	ring := []float32{4, 6, 36, 6, 36, 24}
	img := &shard.Image{ImageID: 1, Width: 40, Height: 30, Format: "png", Bytes: pb.Bytes(),
		Instances: []shard.Instance{
			{AnnID: 1, BBox: [4]float32{4, 6, 32, 18}, Area: 288, Polygons: [][]float32{ring}},
			{AnnID: 2, BBox: [4]float32{0, 0, 20, 30}, Area: 600, IsCrowd: true,
				RLE: &shard.RLE{Height: 30, Width: 40, Counts: m.Counts}},
		}}
	c := Converter{Pixels: shard.Pixels{Encoding: shard.FormatZstd, MaxSide: 20, Resample: shard.ResampleArea}}
	if err := c.Convert(img); err != nil {
		t.Fatal(err)
	}
	if img.Width != 20 || img.Height != 15 || img.SourceWidth != 40 || img.SourceHeight != 30 {
		t.Fatalf("size %dx%d from %dx%d", img.Width, img.Height, img.SourceWidth, img.SourceHeight)
	}
	in := img.Instances[0]
	if in.BBox != [4]float32{2, 3, 16, 9} || in.Area != 72 {
		t.Errorf("box %v area %v", in.BBox, in.Area)
	}
	if got := in.Polygons[0]; got[0] != 2 || got[1] != 3 || got[4] != 18 || got[5] != 12 {
		t.Errorf("ring %v", got)
	}
	r := img.Instances[1].RLE
	small, err := rle.RLE{H: int(r.Height), W: int(r.Width), Counts: r.Counts}.Mask(nil)
	if err != nil || r.Width != 20 || r.Height != 15 {
		t.Fatalf("rle %dx%d: %v", r.Width, r.Height, err)
	}
	if a := rle.Area(r.Counts); a != 150 {
		t.Errorf("resized crowd mask covers %d pixels, want 150 (the left half)", a)
	}
	if small[9] != 1 || small[10] != 0 {
		t.Errorf("mask edge moved: %v", small[:20])
	}
	pix, err := shard.DecodePixels(img.Format, img.Width, img.Height, img.Bytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := toRGB(nil, testImage(40, 30))
	if want := areaRef(src, 40, 30, 20, 15); !bytes.Equal(pix, want) {
		t.Error("stored pixels are not the area average of the source")
	}
}

func TestFrameIsConvertWithoutPixels(t *testing.T) {
	// The plan of a distributed conversion calls Frame on rows without
	// bytes: it must give the row Convert gives, less the pixels.
	var pb bytes.Buffer
	if err := png.Encode(&pb, testImage(50, 20)); err != nil {
		t.Fatal(err)
	}
	mk := func() *shard.Image {
		return &shard.Image{Width: 50, Height: 20, Format: "png", Bytes: pb.Bytes(),
			Instances: []shard.Instance{{BBox: [4]float32{1, 2, 3, 4}, Area: 5, Polygons: [][]float32{{1, 2, 3, 4, 5, 6}}}}}
	}
	c := Converter{Pixels: shard.Pixels{Encoding: shard.FormatRaw, MaxSide: 16, Resample: shard.ResampleArea}}
	a, b := mk(), mk()
	if err := c.Convert(a); err != nil {
		t.Fatal(err)
	}
	var c2 Converter
	c2.Pixels = c.Pixels
	if err := c2.Frame(b); err != nil {
		t.Fatal(err)
	}
	if shard.PlannedRowSize(b, 0) != shard.PlannedRowSize(a, 0) || a.Width != b.Width || a.Height != b.Height ||
		a.Instances[0].Polygons[0][4] != b.Instances[0].Polygons[0][4] {
		t.Errorf("Frame %+v, Convert %+v", b, a)
	}
}
