package pipeline

import (
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/geom"
)

// decodeRow decodes a row's image into RGB pixels taken from buf when it
// is large enough (else a new slice): pre-decoded rows (shard.FormatRaw,
// shard.FormatZstd) by copying or inflating their width×height×3 bytes
// straight into buf, encoded files by decodeImage. A pre-decoded row whose
// bytes are not its size's pixels is an error, like a damaged JPEG.
func decodeRow(row *shard.Image, buf []byte) (augment.Image, error) {
	if !shard.Predecoded(row.Format) {
		return decodeImage(row.Format, row.Bytes, buf)
	}
	pix, err := shard.DecodePixels(row.Format, row.Width, row.Height, row.Bytes, buf)
	if err != nil {
		return augment.Image{}, err
	}
	return augment.Image{W: int(row.Width), H: int(row.Height), Pix: pix}, nil
}

// sourceFrame maps a sample's transform and size from the stored frame of
// a row back to its source image: a pre-decoded row shrunk at conversion
// stores its source size, and predictions must land in the source's
// pixels. Rows at their source size pass through unchanged.
func sourceFrame(row *shard.Image, img *augment.Image, xform geom.Affine) (w, h int32, out geom.Affine) {
	sw, sh := row.SourceSize()
	if !shard.Predecoded(row.Format) || (int(sw) == img.W && int(sh) == img.H) || sw <= 0 || sh <= 0 {
		return int32(img.W), int32(img.H), xform
	}
	// canvas ← stored ← source: stored = source · (W/SW, H/SH).
	sx, sy := float64(img.W)/float64(sw), float64(img.H)/float64(sh)
	return sw, sh, xform.Mul(geom.Scale(sx, sy))
}
