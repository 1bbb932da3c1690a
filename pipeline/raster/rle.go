package raster

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/pipeline/geom"
)

// RLE is a COCO uncompressed run-length mask at image resolution: H rows,
// W columns, pixels in column-major order (index x·H + y), runs
// alternating 0 and 1 starting with 0. Counts must sum to H·W.
type RLE struct {
	H, W   int
	Counts []uint32
}

// DenseRLE maps a crowd RLE onto the grid and writes it into dst like
// Dense. imageToCanvas maps image pixel coordinates to canvas pixel
// coordinates (the letterbox, mosaic or affine placement of the image).
//
// A cell is ON iff the image pixel containing its centre mapped back to the
// image (imageToCanvas inverted, float64) is ON: pixel (⌊x⌋, ⌊y⌋) for the
// mapped point (x, y), OFF when that falls outside the image.
func (z *Rasterizer) DenseRLE(dst []uint8, g Grid, rle RLE, imageToCanvas geom.Affine) error {
	if err := checkDense(dst, g); err != nil {
		return err
	}
	if err := z.rleSpans(g, rle, imageToCanvas); err != nil {
		return err
	}
	z.fillDense(dst, g)
	return nil
}

// AppendWindowRLE is AppendWindow for a crowd RLE, with DenseRLE's rule.
func (z *Rasterizer) AppendWindowRLE(wins []Window, data []uint8, g Grid, rle RLE, imageToCanvas geom.Affine) ([]Window, []uint8, error) {
	if err := g.check(); err != nil {
		return wins, data, err
	}
	if err := z.rleSpans(g, rle, imageToCanvas); err != nil {
		return wins, data, err
	}
	w, data := z.fillWindow(data)
	return append(wins, w), data, nil
}

// rleSpans samples the RLE at every cell of a window around the mapped
// bounding box of its ON pixels, and records the ON runs per row. The ON
// columns are first decoded into a column-major scratch bitmap so that each
// sample is one lookup; COCO's column-major order makes a row of samples
// jump between runs, which defeats any run cursor.
func (z *Rasterizer) rleSpans(g Grid, rle RLE, m geom.Affine) error {
	z.spans = z.spans[:0]
	if rle.H < 0 || rle.W < 0 || (rle.H > 0 && rle.W > math.MaxInt/rle.H) {
		return fmt.Errorf("raster: rle size %dx%d invalid", rle.H, rle.W)
	}
	inv, ok := m.Invert()
	if !ok {
		return fmt.Errorf("raster: rle image-to-canvas affine %v is not invertible", m)
	}
	size := uint64(rle.H) * uint64(rle.W)
	var total uint64
	minX, maxX, minY, maxY := math.MaxInt, -1, math.MaxInt, -1
	for i, c := range rle.Counts {
		start := total
		total += uint64(c)
		if i&1 == 1 && c > 0 && total <= size {
			first, last := int(start), int(total-1)
			x0, x1 := first/rle.H, last/rle.H
			minX, maxX = min(minX, x0), max(maxX, x1)
			if x0 == x1 {
				minY, maxY = min(minY, first%rle.H), max(maxY, last%rle.H)
			} else {
				minY, maxY = 0, rle.H-1
			}
		}
	}
	if total != size {
		return fmt.Errorf("raster: rle counts sum to %d, size %dx%d needs %d", total, rle.H, rle.W, size)
	}
	if maxX < 0 {
		return nil // no ON pixel
	}
	// Decode columns minX..maxX, where every ON run lies.
	base := minX * rle.H
	n := (maxX - minX + 1) * rle.H
	if cap(z.bits) < n {
		z.bits = make([]uint8, n)
	}
	bits := z.bits[:n]
	clear(bits)
	ones := z.ensureOnes(rle.H)
	pos := 0
	for i, c := range rle.Counts {
		if i&1 == 1 && c > 0 {
			for lo, hi := pos-base, pos-base+int(c); lo < hi; {
				lo += copy(bits[lo:hi], ones)
			}
		}
		pos += int(c)
	}
	// Canvas box of the ON pixels' image box, widened by one cell so that
	// float64 rounding in the inverse map cannot put an ON sample outside it.
	bx0, by0, bx1, by1 := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, p := range [4][2]float64{
		{float64(minX), float64(minY)}, {float64(maxX + 1), float64(minY)},
		{float64(minX), float64(maxY + 1)}, {float64(maxX + 1), float64(maxY + 1)},
	} {
		x, y := m.Apply(p[0], p[1])
		bx0, bx1 = min(bx0, x), max(bx1, x)
		by0, by1 = min(by0, y), max(by1, y)
	}
	s := float64(g.Stride)
	c0, c1 := firstCell(bx0-s, g.Cols, s), firstCell(bx1+s, g.Cols, s)
	r0, r1 := firstCell(by0-s, g.Rows, s), firstCell(by1+s, g.Rows, s)
	// Samples outside the ON box are OFF; comparing in float64 before
	// converting keeps huge or NaN coordinates away from int conversion.
	fx0, fx1 := float64(minX), float64(maxX+1)
	fy0, fy1 := float64(minY), float64(maxY+1)
	for r := r0; r < r1; r++ {
		py := (float64(r) + 0.5) * s
		runStart := -1
		for c := c0; c < c1; c++ {
			ix, iy := inv.Apply((float64(c)+0.5)*s, py)
			hit := ix >= fx0 && ix < fx1 && iy >= fy0 && iy < fy1 &&
				bits[(int(ix)-minX)*rle.H+int(iy)] == 1
			if hit && runStart < 0 {
				runStart = c
			} else if !hit && runStart >= 0 {
				z.spans = append(z.spans, span{int32(r), int32(runStart), int32(c)})
				runStart = -1
			}
		}
		if runStart >= 0 {
			z.spans = append(z.spans, span{int32(r), int32(runStart), int32(c1)})
		}
	}
	return nil
}
