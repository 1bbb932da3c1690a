// Package predecode turns a dataset row's encoded image into the stored
// pixels of a pre-decoded shard (shard.Pixels): decode the JPEG or PNG,
// shrink it so its long side is at most the max side by exact area
// averaging (Resize), encode it raw or as a zstd frame, and carry the
// annotations into the stored frame.
//
// Annotations are scaled by sx = stored width / source width and sy =
// stored height / source height: polygon vertices and boxes (x·sx, y·sy,
// w·sx, h·sy), areas by sx·sy, crowd RLE masks resampled to the stored
// size by nearest neighbour at pixel centres. The source size stays in the
// row (SourceWidth, SourceHeight) so predictions map back to the source
// image.
//
// Decoding uses the standard library's image/jpeg and image/png, whose
// pixels are what the loader's pure-Go JPEG path produces: a row stored
// without resizing holds exactly the pixels the loader would have decoded.
package predecode

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // the source encodings
	_ "image/png"

	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/formats/shard"
)

// Converter pre-decodes rows. Its buffers back the rows it converts until
// the next call; it is not safe for concurrent use (one per goroutine).
type Converter struct {
	Pixels shard.Pixels

	enc           shard.PixelEncoder
	rgb, small    []byte
	out           []byte
	mask, smaller []byte
	rles          []shard.RLE
	rs            Resizer
}

// Convert replaces img's encoded Bytes (img.Format jpeg or png) with its
// pixels in c.Pixels.Encoding at the stored size, and moves its instances
// into the stored frame (see Frame). img.Bytes then aliases c's memory.
func (c *Converter) Convert(img *shard.Image) error {
	im, _, err := image.Decode(bytes.NewReader(img.Bytes))
	if err != nil {
		return fmt.Errorf("decode %s: %w", img.Format, err)
	}
	b := im.Bounds()
	if b.Dx() != int(img.Width) || b.Dy() != int(img.Height) {
		return fmt.Errorf("decoded %dx%d, the header says %dx%d", b.Dx(), b.Dy(), img.Width, img.Height)
	}
	c.rgb = toRGB(c.rgb, im)
	w, h := shard.StoredSize(img.Width, img.Height, c.Pixels.MaxSide)
	pix := c.rgb
	if w != img.Width || h != img.Height {
		c.small = c.rs.Resize(c.small, c.rgb, int(img.Width), int(img.Height), int(w), int(h))
		pix = c.small
	}
	if err := c.Frame(img); err != nil {
		return err
	}
	c.out, err = c.enc.Encode(c.Pixels.Encoding, pix, w, h, c.out)
	if err != nil {
		return err
	}
	img.Bytes = c.out
	return nil
}

// Frame sets img's size, source size and format to those of its stored
// pixels and scales its instances into the stored frame; img.Bytes is left
// alone. It is what a distributed conversion's plan runs without reading
// image files, so it must depend on the row's metadata only.
func (c *Converter) Frame(img *shard.Image) error {
	sw, sh := img.Width, img.Height
	w, h := shard.StoredSize(sw, sh, c.Pixels.MaxSide)
	img.SourceWidth, img.SourceHeight = sw, sh
	img.Width, img.Height = w, h
	img.Format = c.Pixels.Encoding
	if w == sw && h == sh {
		return nil
	}
	sx, sy := float64(w)/float64(sw), float64(h)/float64(sh)
	nrle := 0
	for i := range img.Instances {
		if img.Instances[i].RLE != nil {
			nrle++
		}
	}
	// Sized first: instances point into it.
	if cap(c.rles) < nrle {
		c.rles = make([]shard.RLE, 0, nrle)
	}
	c.rles = c.rles[:0]
	for i := range img.Instances {
		in := &img.Instances[i]
		in.BBox = [4]float32{float32(float64(in.BBox[0]) * sx), float32(float64(in.BBox[1]) * sy),
			float32(float64(in.BBox[2]) * sx), float32(float64(in.BBox[3]) * sy)}
		in.Area = float32(float64(in.Area) * sx * sy)
		// The rings are the row's own copies (the dataset reader's
		// scratch), so they are scaled in place.
		for _, r := range in.Polygons {
			for k := 0; k+1 < len(r); k += 2 {
				r[k] = float32(float64(r[k]) * sx)
				r[k+1] = float32(float64(r[k+1]) * sy)
			}
		}
		if in.RLE != nil {
			r, err := c.resizeRLE(in.RLE, sw, sh, w, h)
			if err != nil {
				return fmt.Errorf("ann %d: %w", in.AnnID, err)
			}
			c.rles = append(c.rles, r)
			in.RLE = &c.rles[len(c.rles)-1]
		}
	}
	return nil
}

// resizeRLE samples a crowd mask of the source size at the centres of the
// stored pixels.
func (c *Converter) resizeRLE(r *shard.RLE, sw, sh, w, h int32) (shard.RLE, error) {
	if r.Width != sw || r.Height != sh {
		return shard.RLE{}, fmt.Errorf("rle size %dx%d differs from the image's %dx%d", r.Width, r.Height, sw, sh)
	}
	var err error
	c.mask, err = rle.RLE{H: int(r.Height), W: int(r.Width), Counts: r.Counts}.Mask(c.mask)
	if err != nil {
		return shard.RLE{}, err
	}
	n := int(w) * int(h)
	if cap(c.smaller) < n {
		c.smaller = make([]byte, n)
	}
	c.smaller = c.smaller[:n]
	for y := 0; y < int(h); y++ {
		py := int((int64(2*y+1) * int64(sh)) / (2 * int64(h)))
		for x := 0; x < int(w); x++ {
			px := int((int64(2*x+1) * int64(sw)) / (2 * int64(w)))
			c.smaller[y*int(w)+x] = c.mask[py*int(sw)+px]
		}
	}
	out, err := rle.FromMask(c.smaller, int(h), int(w))
	if err != nil {
		return shard.RLE{}, err
	}
	return shard.RLE{Height: h, Width: w, Counts: out.Counts}, nil
}

// toRGB writes im's pixels as packed RGB into dst (grown when short):
// YCbCr through color.YCbCrToRGB, grey replicated, NRGBA's colour
// channels without alpha, anything else through its RGBA method.
func toRGB(dst []byte, im image.Image) []byte {
	b := im.Bounds()
	w, h := b.Dx(), b.Dy()
	n := 3 * w * h
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	i := 0
	switch m := im.(type) {
	case *image.YCbCr:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				dst[i], dst[i+1], dst[i+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				i += 3
			}
		}
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			o := m.PixOffset(b.Min.X, y)
			for _, v := range m.Pix[o : o+w] {
				dst[i], dst[i+1], dst[i+2] = v, v, v
				i += 3
			}
		}
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := 0; x < w; x++ {
				dst[i], dst[i+1], dst[i+2] = row[4*x], row[4*x+1], row[4*x+2]
				i += 3
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bb, _ := im.At(x, y).RGBA()
				dst[i], dst[i+1], dst[i+2] = uint8(r>>8), uint8(g>>8), uint8(bb>>8)
				i += 3
			}
		}
	}
	return dst
}
