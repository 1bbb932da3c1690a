package rle

import "fmt"

// FromMask encodes a dense h×w mask given in row-major order (index
// y·w + x, the layout of Go images and of the loader's grid masks) into a
// column-major COCO RLE with canonical runs, as pycocotools.mask.encode
// does for the transposed (Fortran-order) array. Any non-zero byte is
// foreground.
func FromMask(mask []byte, h, w int) (RLE, error) {
	if h < 0 || w < 0 || len(mask) != h*w {
		return RLE{}, fmt.Errorf("mask has %d bytes, size [%d, %d] needs %d", len(mask), h, w, h*w)
	}
	cnts := make([]uint32, 0, 16)
	var c uint32
	p := false
	for x := 0; x < w; x++ {
		for i := x; i < len(mask); i += w {
			v := mask[i] != 0
			if v != p {
				cnts = append(cnts, c)
				c = 0
				p = v
			}
			c++
		}
	}
	cnts = append(cnts, c)
	return RLE{H: h, W: w, Counts: cnts}, nil
}

// Mask decodes r into dst (resized to H·W) in row-major order, 1 for
// foreground and 0 elsewhere, and returns it. Runs beyond H·W are an error.
func (r RLE) Mask(dst []byte) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return dst, err
	}
	n := r.H * r.W
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	idx := 0
	v := byte(0)
	for _, c := range r.Counts {
		for k := uint32(0); k < c; k++ {
			x, y := idx/r.H, idx%r.H
			dst[y*r.W+x] = v
			idx++
		}
		v ^= 1
	}
	return dst, nil
}
