package imagehdr

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

func TestRead(t *testing.T) {
	var small bytes.Buffer
	if err := png.Encode(&small, image.NewNRGBA(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    []byte
		w, h    int
		format  string
		bpp     int
		tooBig  bool // over MaxPixels
		wantErr bool
	}{
		{name: "small png", data: small.Bytes(), w: 3, h: 2, format: "png", bpp: 4},
		{name: "65535² RGBA16 png in 57 bytes", data: testimg.PNGHeader(65535, 65535, 16, 6), w: 65535, h: 65535, format: "png", bpp: 8, tooBig: true},
		{name: "20000² RGB png", data: testimg.PNGHeader(20000, 20000, 8, 2), w: 20000, h: 20000, format: "png", bpp: 4, tooBig: true},
		{name: "grey png at the limit", data: testimg.PNGHeader(8192, 8192, 8, 0), w: 8192, h: 8192, format: "png", bpp: 1},
		{name: "truncated 16000² jpeg", data: testimg.JPEGClaiming(16000, 16000), w: 16000, h: 16000, format: "jpeg", bpp: 4, tooBig: true},
		{name: "not an image", data: []byte("GIF89a"), wantErr: true},
		{name: "empty", data: nil, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Read(tt.data)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Read = %+v, want an error", h)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Width != tt.w || h.Height != tt.h || h.Format != tt.format || h.BytesPerPixel != tt.bpp {
				t.Fatalf("Read = %+v, want %dx%d %s at %d bytes a pixel", h, tt.w, tt.h, tt.format, tt.bpp)
			}
			err = h.Check(0, 0)
			if got := errors.Is(err, ErrTooLarge); got != tt.tooBig {
				t.Fatalf("Check(0, 0) = %v, want ErrTooLarge %v", err, tt.tooBig)
			}
		})
	}
}

func TestCheckBytes(t *testing.T) {
	tests := []struct {
		w, h, bpp int
		maxBytes  int64
		ok        bool
	}{
		{640, 480, 0, 3 * 640 * 480, true},
		{640, 480, 0, 3*640*480 - 1, false},
		{640, 480, 4, 7 * 640 * 480, true},
		{640, 480, 8, 7 * 640 * 480, false},
		{640, 480, 8, 0, true}, // no byte bound
		{0, 480, 0, 0, false},
	}
	for _, tt := range tests {
		err := Check(tt.w, tt.h, tt.bpp, 0, tt.maxBytes)
		if (err == nil) != tt.ok {
			t.Errorf("Check(%d, %d, %d, 0, %d) = %v, want ok %v", tt.w, tt.h, tt.bpp, tt.maxBytes, err, tt.ok)
		}
	}
}

func TestBytesPerPixelBoundsTheDecodersImage(t *testing.T) {
	// The bound must hold for what image.Decode really builds.
	models := map[string]image.Image{
		"gray":    image.NewGray(image.Rect(0, 0, 4, 4)),
		"gray16":  image.NewGray16(image.Rect(0, 0, 4, 4)),
		"nrgba":   image.NewNRGBA(image.Rect(0, 0, 4, 4)),
		"nrgba64": image.NewNRGBA64(image.Rect(0, 0, 4, 4)),
		"rgba":    image.NewRGBA(image.Rect(0, 0, 4, 4)),
		"pal":     image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.Black, color.White}),
	}
	for name, m := range models {
		var b bytes.Buffer
		if err := png.Encode(&b, m); err != nil {
			t.Fatal(err)
		}
		h, err := Read(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		im, err := png.Decode(bytes.NewReader(b.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if got := pixBytes(im) / 16; got > h.BytesPerPixel {
			t.Errorf("%s: the decoder built %d bytes a pixel, the header's bound is %d", name, got, h.BytesPerPixel)
		}
	}
}

func pixBytes(im image.Image) int {
	switch m := im.(type) {
	case *image.Gray:
		return len(m.Pix)
	case *image.Gray16:
		return len(m.Pix)
	case *image.NRGBA:
		return len(m.Pix)
	case *image.NRGBA64:
		return len(m.Pix)
	case *image.RGBA:
		return len(m.Pix)
	case *image.RGBA64:
		return len(m.Pix)
	case *image.Paletted:
		return len(m.Pix)
	}
	return 1 << 30
}

func FuzzRead(f *testing.F) {
	f.Add(testimg.PNGHeader(65535, 65535, 16, 6))
	f.Add(testimg.PNGHeader(1, 1, 8, 2))
	f.Add([]byte{0xff, 0xd8, 0xff, 0xc0, 0, 11, 8, 0x3e, 0x80, 0x3e, 0x80, 1, 1, 0x11, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Read(data)
		if err != nil {
			return
		}
		if h.Width <= 0 || h.Height <= 0 || h.BytesPerPixel < 1 || h.BytesPerPixel > 8 {
			t.Fatalf("Read accepted %+v", h)
		}
		_ = h.Check(0, 1<<30)
	})
}
