//go:build !turbojpeg || !cgo

package pipeline

import (
	"bytes"
	"image/jpeg"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// JPEGDecoder names the JPEG implementation of this build.
const JPEGDecoder = "image/jpeg (Go standard library)"

func decodeJPEG(data, buf []byte) (augment.Image, error) {
	im, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return augment.Image{}, err
	}
	return fromImage(im, buf)
}
