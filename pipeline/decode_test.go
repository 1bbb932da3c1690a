package pipeline

import (
	"image"
	"image/color"
	"math/rand/v2"
	"testing"
)

// TestToRGBMatchesColorModel checks the fast paths against image.At's
// colour conversion for every subsampling and odd sizes.
func TestToRGBMatchesColorModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ratios := []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio422,
		image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410}
	for _, ratio := range ratios {
		for _, sz := range [][2]int{{1, 1}, {7, 5}, {16, 9}, {33, 17}} {
			im := image.NewYCbCr(image.Rect(0, 0, sz[0], sz[1]), ratio)
			for _, p := range [][]uint8{im.Y, im.Cb, im.Cr} {
				for i := range p {
					p[i] = uint8(r.IntN(256))
				}
			}
			for _, src := range []image.Image{im, im.SubImage(image.Rect(sz[0]/3, sz[1]/3, sz[0], sz[1]))} {
				b := src.Bounds()
				dst := make([]byte, 3*b.Dx()*b.Dy())
				toRGB(dst, src)
				i := 0
				for y := b.Min.Y; y < b.Max.Y; y++ {
					for x := b.Min.X; x < b.Max.X; x++ {
						c := color.RGBAModel.Convert(src.At(x, y)).(color.RGBA)
						if dst[i] != c.R || dst[i+1] != c.G || dst[i+2] != c.B {
							t.Fatalf("%v %v at (%d,%d): %v, want %v", ratio, b, x, y, dst[i:i+3], c)
						}
						i += 3
					}
				}
			}
		}
	}
}

// FuzzDecodeImage feeds arbitrary bytes to the image decoders of the build
// (image/jpeg or libjpeg-turbo, image/png): an error or an image whose
// pixel buffer matches its size, never a panic.
func FuzzDecodeImage(f *testing.F) {
	for _, row := range synth(f, 3, 2) {
		f.Add(row.Format, row.Bytes)
	}
	f.Add("jpeg", []byte{0xff, 0xd8, 0xff})
	f.Fuzz(func(t *testing.T, format string, data []byte) {
		im, err := decodeImage(format, data, nil)
		if err != nil {
			return
		}
		if im.W <= 0 || im.H <= 0 || len(im.Pix) != 3*im.W*im.H {
			t.Fatalf("%s: %dx%d with %d bytes", format, im.W, im.H, len(im.Pix))
		}
	})
}

func TestCacheReusesBuffersThatFit(t *testing.T) {
	c := newCache(1 << 30)
	for _, n := range []int{900, 300, 600} {
		c.recycle(make([]byte, n))
	}
	for _, tc := range []struct {
		need    int64
		wantCap int // 0: none fits
	}{
		{500, 600}, // the smallest that holds it, not the last freed
		{1000, 0},  // none holds it: the free list keeps all of them
		{300, 300},
		{300, 900},
		{1, 0},
	} {
		b := c.takeFree(tc.need)
		if cap(b) != tc.wantCap {
			t.Fatalf("takeFree(%d) gave a buffer of %d, want %d", tc.need, cap(b), tc.wantCap)
		}
	}
	// A full list makes room for a larger buffer by dropping its smallest,
	// and keeps what it has over a smaller one.
	for i := 0; i < maxFree; i++ {
		c.recycle(make([]byte, 100+i))
	}
	c.recycle(make([]byte, 50))
	c.recycle(make([]byte, 5000))
	if len(c.free) != maxFree {
		t.Fatalf("%d free buffers, want %d", len(c.free), maxFree)
	}
	if b := c.takeFree(5000); cap(b) != 5000 {
		t.Fatalf("the largest buffer was not kept (got %d)", cap(b))
	}
	if b := c.takeFree(0); cap(b) != 101 {
		t.Fatalf("smallest kept buffer %d, want 101 (100 dropped for 5000, 50 refused)", cap(b))
	}
}
