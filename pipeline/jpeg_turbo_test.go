//go:build turbojpeg && cgo

package pipeline

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"testing"
)

// TestTurboMatchesStdlib checks libjpeg-turbo's pixels against image/jpeg's
// on smooth photo-like images: the IDCT and chroma upsampling differ, so
// values may differ by a few levels (on COCO photos: mean 0.25, max 4). Hard
// saturated colour edges differ far more (chroma upsampling), which is why
// the shapes of the loader tests are not used here.
func TestTurboMatchesStdlib(t *testing.T) {
	for i, size := range [][2]int{{96, 64}, {65, 33}, {640, 480}} {
		w, h := size[0], size[1]
		im := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				im.Set(x, y, color.RGBA{uint8(40 + x*150/w), uint8(200 - y*120/h), uint8(90 + (x+y)*60/(w+h)), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, im, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		got, err := decodeJPEG(buf.Bytes(), nil)
		if err != nil {
			t.Fatal(err)
		}
		std, err := jpeg.Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := fromImage(std, nil)
		if got.W != want.W || got.H != want.H {
			t.Fatalf("image %d: %dx%d vs %dx%d", i, got.W, got.H, want.W, want.H)
		}
		var sum, worst int
		for k := range got.Pix {
			d := max(int(got.Pix[k])-int(want.Pix[k]), int(want.Pix[k])-int(got.Pix[k]))
			sum += d
			worst = max(worst, d)
		}
		if mean := float64(sum) / float64(len(got.Pix)); mean > 1.5 || worst > 8 {
			t.Fatalf("image %d: mean |diff| %.2f, max %d", i, mean, worst)
		}
	}
	if _, err := decodeJPEG([]byte("not a jpeg"), nil); err == nil {
		t.Fatal("garbage accepted")
	}
}
