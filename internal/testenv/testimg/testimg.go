// Package testimg builds the image files tests feed the readers: small
// valid JPEGs and PNGs, and hostile ones (a PNG header claiming any size
// over no data, a JPEG header claiming 16,000² over truncated data, files
// cut short).
package testimg

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
)

func gradient(w, h int) *image.RGBA {
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			im.Set(x, y, color.RGBA{uint8(x * 7), uint8(y * 5), uint8(x ^ y), 255})
		}
	}
	return im
}

// JPEG is a valid baseline w×h JPEG.
func JPEG(w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, gradient(w, h), &jpeg.Options{Quality: 90}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// PNG is a valid w×h RGBA PNG.
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, gradient(w, h)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// chunk is one PNG chunk with its CRC.
func chunk(typ string, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	b = append(b, typ...)
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[4:]))
}

// HugePNG is a 68-byte PNG (the was 74) whose header says 65,535×65,535 RGBA, 16 bits
// a sample: well formed, but decoding it would allocate 32 GiB.
func HugePNG() []byte {
	ihdr := binary.BigEndian.AppendUint32(nil, 65535)
	ihdr = binary.BigEndian.AppendUint32(ihdr, 65535)
	ihdr = append(ihdr, 16, 6, 0, 0, 0) // depth 16, RGBA, deflate, filter 0, no interlace
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", []byte{0x78, 0x9c, 0x63, 0x60, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x00})...)
	return append(b, chunk("IEND", nil)...)
}

// PNGHeader is a PNG of IHDR and IEND alone: a header that claims w×h at
// the given bit depth and colour type over no pixel data (decoding it
// would allocate what the header claims).
func PNGHeader(w, h uint32, depth, colorType byte) []byte {
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, depth, colorType, 0, 0, 0) // deflate, filter 0, no interlace
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	return append(b, chunk("IEND", nil)...)
}

// JPEGClaiming is a JPEG whose frame header says w×h over the data of a
// small image, cut 64 bytes into its scan.
func JPEGClaiming(w, h int) []byte {
	b := JPEG(64, 64)
	sof := bytes.Index(b, []byte{0xff, 0xc0})
	binary.BigEndian.PutUint16(b[sof+5:], uint16(h))
	binary.BigEndian.PutUint16(b[sof+7:], uint16(w))
	sos := bytes.Index(b, []byte{0xff, 0xda})
	return b[:sos+2+int(binary.BigEndian.Uint16(b[sos+2:]))+64]
}

// Half is the first half of b: a file cut short in transfer.
func Half(b []byte) []byte { return b[:len(b)/2] }
