// Package imagehdr reads what an encoded image's header says (size, format,
// colour model) without decoding a pixel, so that every reader can refuse an
// image too large to decode before any pixel buffer exists.
//
// Semantics a user must know:
//
//   - Only the header is read: a file whose header is sound but whose data
//     is truncated or damaged passes here; decoding finds that.
//   - DecodeBytes is an upper bound on what a decode into 3-byte RGB holds at
//     its peak: the decoder's own image (1 to 8 bytes a pixel, by colour
//     model) plus the RGB copy. It is the figure a memory budget is charged.
//   - Check refuses an image over a pixel bound or a byte bound with an error
//     wrapping ErrTooLarge: convert skips such an image, the loader skips the
//     sample, both counting it under ReasonTooLarge.
package imagehdr

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers the formats DecodeConfig recognises
	_ "image/png"
	"io"

	"github.com/segpipe/segpipe/internal/bytesize"
)

// MaxPixels is the default bound on an image's width·height: 2^26 pixels
// (8192×8192, 192 MiB of RGB). Beyond it a single decode, with its decoder's
// own copy, needs over half a GiB: no training canvas needs that, and a
// crafted header (a 74-byte PNG claiming 65,535²) must not make a process
// try. Sets of larger images are converted with --max-side or tiled first.
const MaxPixels = 1 << 26

// ReasonTooLarge is the skip reason of an image refused by Check, in a
// conversion's and a loader's counts alike.
const ReasonTooLarge = "image_too_large"

// ErrTooLarge is wrapped by Check's refusals.
var ErrTooLarge = errors.New("image too large")

// Header is what an image's header says.
type Header struct {
	Width, Height int
	Format        string // "jpeg" or "png"
	// BytesPerPixel is the size of a pixel in the image the standard
	// library's decoder builds for this colour model (1 for grey or
	// paletted, 2 for 16-bit grey, 3 for YCbCr at most, 4 for RGBA or
	// CMYK, 8 for 16-bit RGBA).
	BytesPerPixel int
}

// Read reads the header of a JPEG or PNG held in data.
func Read(data []byte) (Header, error) { return ReadFrom(bytes.NewReader(data)) }

// ReadFrom reads the header of a JPEG or PNG from r, consuming only what
// the header needs.
func ReadFrom(r io.Reader) (Header, error) {
	cfg, format, err := image.DecodeConfig(r)
	if err != nil {
		return Header{}, err
	}
	if format != "jpeg" && format != "png" {
		return Header{}, fmt.Errorf("unsupported image format %q (want jpeg or png)", format)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return Header{}, fmt.Errorf("impossible image size %dx%d", cfg.Width, cfg.Height)
	}
	return Header{Width: cfg.Width, Height: cfg.Height, Format: format, BytesPerPixel: bytesPerPixel(cfg.ColorModel)}, nil
}

// bytesPerPixel is the pixel size of the image a decoder builds for m; an
// unknown model counts as the largest.
func bytesPerPixel(m color.Model) int {
	switch m {
	case color.GrayModel, color.AlphaModel:
		return 1
	case color.Gray16Model, color.Alpha16Model:
		return 2
	case color.YCbCrModel, color.NYCbCrAModel:
		return 4 // YCbCr 4:4:4 is 3; with alpha, 4
	case color.RGBAModel, color.NRGBAModel, color.CMYKModel:
		return 4
	case color.RGBA64Model, color.NRGBA64Model:
		return 8
	}
	if _, ok := m.(color.Palette); ok {
		return 1
	}
	return 8
}

// Pixels is Width·Height.
func (h Header) Pixels() int64 { return int64(h.Width) * int64(h.Height) }

// DecodeBytes bounds the bytes a decode into RGB holds at its peak.
func (h Header) DecodeBytes() int64 { return DecodeBytes(h.Width, h.Height, h.BytesPerPixel) }

// DecodeBytes bounds the bytes a decode of a w×h image holds at its peak
// when its decoder builds an image of bpp bytes a pixel and the result is
// copied to RGB (bpp 0 for pixels already stored as RGB: the copy alone).
func DecodeBytes(w, h, bpp int) int64 { return int64(w) * int64(h) * int64(bpp+3) }

// Check refuses a w×h image over maxPixels pixels (<= 0: MaxPixels) or whose
// decode needs more than maxBytes (<= 0: no byte bound), with an error
// wrapping ErrTooLarge that names both figures and the bound.
func Check(w, h, bpp int, maxPixels, maxBytes int64) error {
	if maxPixels <= 0 {
		maxPixels = MaxPixels
	}
	if w <= 0 || h <= 0 {
		return fmt.Errorf("impossible image size %dx%d", w, h)
	}
	if px := int64(w) * int64(h); px > maxPixels {
		return fmt.Errorf("%w: %dx%d is %d pixels, over the limit of %d", ErrTooLarge, w, h, px, maxPixels)
	}
	if need := DecodeBytes(w, h, bpp); maxBytes > 0 && need > maxBytes {
		return fmt.Errorf("%w: decoding %dx%d needs %s, over the %s the memory budget leaves for one image",
			ErrTooLarge, w, h, bytesize.Format(need), bytesize.Format(maxBytes))
	}
	return nil
}

// Check is the package's Check for this header.
func (h Header) Check(maxPixels, maxBytes int64) error {
	return Check(h.Width, h.Height, h.BytesPerPixel, maxPixels, maxBytes)
}
