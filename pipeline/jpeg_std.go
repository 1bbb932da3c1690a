//go:build !turbojpeg || !cgo

package pipeline

import (
	"bytes"
	"image/jpeg"
	"sync"

	"github.com/segpipe/segpipe/pipeline/augment"
	segjpeg "github.com/segpipe/segpipe/pipeline/jpeg"
)

// JPEGDecoder names the JPEG implementation of this build.
const JPEGDecoder = "segpipe pipeline/jpeg (pure Go; image/jpeg for the rest)"

// jpegDecoders keeps decoders (their tables and MCU-row planes) for reuse
// across decodes and workers.
var jpegDecoders = sync.Pool{New: func() any { return new(segjpeg.Decoder) }}

// decodeJPEG decodes baseline streams with pipeline/jpeg straight into buf
// (same pixels as image/jpeg) and hands everything else — progressive,
// CMYK, damaged — to image/jpeg, which decides.
func decodeJPEG(data, buf []byte) (augment.Image, error) {
	d := jpegDecoders.Get().(*segjpeg.Decoder)
	w, h, pix, err := d.Decode(data, buf)
	jpegDecoders.Put(d)
	if err == nil {
		return augment.Image{W: w, H: h, Pix: pix}, nil
	}
	im, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return augment.Image{}, err
	}
	return fromImage(im, buf)
}
