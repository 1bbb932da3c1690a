package jpeg

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	stdjpeg "image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/internal/cputime"
	"github.com/segpipe/segpipe/internal/testenv/shared"
)

// stdRGB decodes with image/jpeg and converts as the loader's reference
// path does (color.YCbCrToRGB, chroma replicated).
func stdRGB(t testing.TB, data []byte) (int, int, []byte) {
	im, err := stdjpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("image/jpeg: %v", err)
	}
	b := im.Bounds()
	out := make([]byte, 0, 3*b.Dx()*b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(im.At(x, y)).(color.RGBA)
			out = append(out, c.R, c.G, c.B)
		}
	}
	return b.Dx(), b.Dy(), out
}

// synthImage draws smooth gradients plus noise: flat areas (DC-only
// blocks) and busy ones.
func synthImage(r *rand.Rand, w, h int, gray bool) image.Image {
	if gray {
		im := image.NewGray(image.Rect(0, 0, w, h))
		for i := range im.Pix {
			im.Pix[i] = uint8(i%w + r.IntN(40))
		}
		return im
	}
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			n := uint8(0)
			if (x/16+y/16)%2 == 0 {
				n = uint8(r.IntN(90))
			}
			im.SetRGBA(x, y, color.RGBA{uint8(3*x) + n, uint8(2*y) + n, uint8(x+y) ^ n, 255})
		}
	}
	return im
}

// TestMatchesStandardLibrary: for encodings of many sizes and qualities
// (4:2:0 from image/jpeg's encoder, grey) the decoder gives image/jpeg's
// pixels exactly.
func TestMatchesStandardLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var d Decoder
	for trial := 0; trial < 40; trial++ {
		w, h := 1+r.IntN(90), 1+r.IntN(90)
		if trial < 4 {
			w, h = []int{1, 8, 16, 17}[trial], []int{1, 8, 16, 33}[trial]
		}
		gray := trial%5 == 4
		var buf bytes.Buffer
		q := 1 + r.IntN(100)
		if err := stdjpeg.Encode(&buf, synthImage(r, w, h, gray), &stdjpeg.Options{Quality: q}); err != nil {
			t.Fatal(err)
		}
		checkSame(t, &d, buf.Bytes(), "synthetic")
	}
}

// TestMatchesStandardLibraryOnCOCO: the same on the shared coco-tiny
// images (4:4:4 and whatever else they hold); images the decoder leaves to
// image/jpeg are counted, not failed.
func TestMatchesStandardLibraryOnCOCO(t *testing.T) {
	dir := shared.Path(t, "data/coco-tiny/val2017")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if len(files) == 0 {
		t.Skip("no coco-tiny images")
	}
	if testing.Short() {
		files = files[:8]
	}
	var d Decoder
	handled := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if checkSame(t, &d, data, filepath.Base(f)) {
			handled++
		}
	}
	t.Logf("%d of %d images decoded here, the rest left to image/jpeg", handled, len(files))
	if handled == 0 {
		t.Fatal("decoder handled none of the coco-tiny images")
	}
}

func checkSame(t *testing.T, d *Decoder, data []byte, name string) bool {
	t.Helper()
	w, h, pix, err := d.Decode(data, nil)
	if err != nil {
		t.Logf("%s: %v", name, err)
		return false
	}
	sw, sh, want := stdRGB(t, data)
	if w != sw || h != sh {
		t.Fatalf("%s: %dx%d, image/jpeg %dx%d", name, w, h, sw, sh)
	}
	for i := range want {
		if pix[i] != want[i] {
			t.Fatalf("%s (%dx%d): byte %d (pixel %d,%d): %d, image/jpeg %d", name, w, h, i, i/3%w, i/3/w, pix[i], want[i])
		}
	}
	return true
}

// BenchmarkDecode decodes one coco-tiny image into a reused buffer, with
// the vector and the Go inverse DCT, and as the same-run baseline with
// image/jpeg (to its YCbCr image, before any RGB conversion).
func BenchmarkDecode(b *testing.B) {
	dir := shared.Path(b, "data/coco-tiny/val2017")
	files, _ := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if len(files) == 0 {
		b.Skip("no coco-tiny images")
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		goK  bool
	}{{"segpipe", false}, {"segpipe-go-idct", true}} {
		b.Run(k.name, func(b *testing.B) {
			forceGo = k.goK
			defer func() { forceGo = false }()
			defer reportCPU(b)()
			var d Decoder
			var buf []byte
			for b.Loop() {
				_, _, pix, err := d.Decode(data, buf)
				if err != nil {
					b.Fatal(err)
				}
				buf = pix
			}
		})
	}
	b.Run("image-jpeg", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := stdjpeg.Decode(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU reports process CPU time per op, the figure a shared machine
// disturbs least.
func reportCPU(b *testing.B) func() {
	c0, _ := cputime.Process()
	return func() {
		c1, _ := cputime.Process()
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
}

// TestFixtures: the encodings of testdata/make.py. Those this decoder
// handles must match image/jpeg exactly; progressive and CMYK must be
// left to image/jpeg.
func TestFixtures(t *testing.T) {
	var d Decoder
	for _, tc := range []struct {
		file    string
		handled bool
	}{
		{"444.jpg", true}, {"422.jpg", true}, {"rst420.jpg", true}, {"rstgray.jpg", true},
		{"progressive.jpg", false}, {"cmyk.jpg", false},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := checkSame(t, &d, data, tc.file); got != tc.handled {
			t.Errorf("%s: handled %v, want %v", tc.file, got, tc.handled)
		}
		if !tc.handled {
			if _, _, _, err := d.Decode(data, nil); !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s: error %v, want ErrUnsupported", tc.file, err)
			}
		}
	}
}

// FuzzDecode: any input gives an error or an image, never a panic; and
// what this decoder accepts, image/jpeg decodes to the same pixels.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"444.jpg", "422.jpg", "rst420.jpg", "rstgray.jpg", "progressive.jpg"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	var d Decoder
	f.Fuzz(func(t *testing.T, data []byte) {
		w, h, pix, err := d.Decode(data, nil)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v does not wrap ErrUnsupported", err)
			}
			return
		}
		if len(pix) != 3*w*h {
			t.Fatalf("%dx%d with %d bytes", w, h, len(pix))
		}
		if _, err := stdjpeg.Decode(bytes.NewReader(data)); err != nil {
			t.Fatalf("decoded %dx%d, but image/jpeg fails: %v", w, h, err)
		}
		checkSame(t, &d, data, "fuzz input")
	})
}
