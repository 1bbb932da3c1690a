package shard

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Values of the image_format column. The first two are encoded files kept
// as they were; the last two are pre-decoded pixels (format version 3).
const (
	FormatJPEG = "jpeg"
	FormatPNG  = "png"
	// FormatRaw is RGB pixels, uint8, row-major, height×width×3 bytes with
	// no header: the row's width and height give the layout.
	FormatRaw = "raw"
	// FormatZstd is FormatRaw's bytes as one zstd frame that records its
	// content size (zstd leaves it out of frames under 256 bytes).
	FormatZstd = "zstd"
)

// Predecoded reports whether format stores pixels rather than an encoded
// file.
func Predecoded(format string) bool { return format == FormatRaw || format == FormatZstd }

// Pixels is how a conversion stored its images, recorded in the manifest
// (absent for original encodings, so those manifests read as before).
type Pixels struct {
	// Encoding is FormatRaw or FormatZstd.
	Encoding string `json:"encoding"`
	// MaxSide is the bound on the stored long side (0: stored at the
	// source size). Images are never upscaled.
	MaxSide int `json:"max_side,omitempty"`
	// Resample names the filter that made smaller images: ResampleArea.
	Resample string `json:"resample,omitempty"`
}

func (p *Pixels) check() error {
	if !Predecoded(p.Encoding) {
		return fmt.Errorf("pixels: encoding %q, want %s or %s", p.Encoding, FormatRaw, FormatZstd)
	}
	if p.MaxSide < 0 {
		return fmt.Errorf("pixels: max_side %d is negative", p.MaxSide)
	}
	if p.MaxSide > 0 && p.Resample != ResampleArea {
		return fmt.Errorf("pixels: resample %q, want %q", p.Resample, ResampleArea)
	}
	return nil
}

// ResampleArea is exact area averaging: each stored pixel is the mean of
// the source area it covers, fractional pixels weighted by their covered
// fraction, rounded half up (OpenCV's INTER_AREA), in integer arithmetic so
// every platform stores the same bytes.
const ResampleArea = "area"

// StoredSize is the size an image of w×h is stored at when the long side is
// bounded by maxSide (<= 0: no bound): the long side becomes maxSide, the
// other is scaled by the same factor and rounded half up, at least 1. An
// image that already fits keeps its size.
func StoredSize(w, h int32, maxSide int) (int32, int32) {
	if maxSide <= 0 || (int64(w) <= int64(maxSide) && int64(h) <= int64(maxSide)) || w <= 0 || h <= 0 {
		return w, h
	}
	n := int64(maxSide)
	if w >= h {
		return int32(n), int32(max(1, (int64(h)*n+int64(w)/2)/int64(w)))
	}
	return int32(max(1, (int64(w)*n+int64(h)/2)/int64(h))), int32(n)
}

// PixelBytes is the size of a w×h image's raw pixels.
func PixelBytes(w, h int32) int64 { return 3 * int64(w) * int64(h) }

// ErrPixels is wrapped by every error of DecodePixels and EncodePixels.
var ErrPixels = errors.New("bad pixel data")

// maxFrameBytes bounds what a zstd frame may inflate to, whatever its
// header says: 3 × 32768² bytes, far beyond any training image.
const maxFrameBytes = 3 << 30

// zstdDec is shared: a klauspost decoder runs up to its concurrency of
// DecodeAll calls at once, each with its own block decoder and history,
// so this is the per-worker pool.
var zstdDec = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithDecoderMaxMemory(maxFrameBytes))
})

// DecodePixels returns the RGB pixels of a w×h row stored as format
// (FormatRaw or FormatZstd) in dst's memory when its capacity is at least
// 3·w·h bytes, else in a new slice. Raw bytes are copied, so the result
// does not alias data. A row whose bytes do not hold exactly w×h×3
// pixels is an error wrapping ErrPixels; nothing panics on damaged bytes.
func DecodePixels(format string, w, h int32, data, dst []byte) ([]byte, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("%w: %s image of %dx%d", ErrPixels, format, w, h)
	}
	n := PixelBytes(w, h)
	if n > maxFrameBytes {
		return nil, fmt.Errorf("%w: %dx%d image is larger than %d bytes", ErrPixels, w, h, maxFrameBytes)
	}
	switch format {
	case FormatRaw:
		if int64(len(data)) != n {
			return nil, fmt.Errorf("%w: raw %dx%d image has %d bytes, want %d", ErrPixels, w, h, len(data), n)
		}
		if int64(cap(dst)) < n {
			dst = make([]byte, n)
		}
		dst = dst[:n]
		copy(dst, data)
		return dst, nil
	case FormatZstd:
		var hd zstd.Header
		if err := hd.Decode(data); err != nil {
			return nil, fmt.Errorf("%w: zstd frame header: %v", ErrPixels, err)
		}
		// The encoder leaves the size out of frames under 256 bytes.
		if (hd.HasFCS && hd.FrameContentSize != uint64(n)) || (!hd.HasFCS && n >= 256) {
			return nil, fmt.Errorf("%w: zstd frame of %d bytes (known %v) for a %dx%d image of %d", ErrPixels, hd.FrameContentSize, hd.HasFCS, w, h, n)
		}
		dec, err := zstdDec()
		if err != nil {
			return nil, err
		}
		if int64(cap(dst)) < n {
			dst = make([]byte, 0, n)
		}
		out, err := dec.DecodeAll(data, dst[:0])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrPixels, err)
		}
		if int64(len(out)) != n {
			return nil, fmt.Errorf("%w: zstd frame decodes to %d bytes, want %d", ErrPixels, len(out), n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %q is not a pre-decoded format", ErrPixels, format)
}

// PixelEncoder encodes RGB pixels for the image column. It is not safe for
// concurrent use; use one per goroutine.
type PixelEncoder struct {
	enc *zstd.Encoder
}

// Encode appends pix (3·w·h bytes) encoded as format (FormatRaw or
// FormatZstd) to dst[:0] and returns it. The zstd frame is level 3
// (zstd's default), single-threaded and checksummed, so the same pixels
// give the same bytes.
func (e *PixelEncoder) Encode(format string, pix []byte, w, h int32, dst []byte) ([]byte, error) {
	if int64(len(pix)) != PixelBytes(w, h) {
		return nil, fmt.Errorf("%w: %d bytes for a %dx%d image", ErrPixels, len(pix), w, h)
	}
	switch format {
	case FormatRaw:
		return append(dst[:0], pix...), nil
	case FormatZstd:
		if e.enc == nil {
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
				zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true))
			if err != nil {
				return nil, err
			}
			e.enc = enc
		}
		return e.enc.EncodeAll(pix, dst[:0]), nil
	}
	return nil, fmt.Errorf("%w: %q is not a pre-decoded format", ErrPixels, format)
}
