package predict

import (
	"math"

	"github.com/segpipe/segpipe/trainer/model"
)

// RoundBelow is the detection count under which the crop box is rounded
// to whole grid cells (the reference's CPU crop_mask rule).
const RoundBelow = 50

// CropCells returns the grid rows [r0, r1) and columns [c0, c1) a box in
// canvas pixels covers on a grid of stride canvas pixels per cell; an
// inverted box gives an empty range (r1 == r0 or c1 == c0).
func CropCells(box [4]float32, stride float32, hp, wp int, round bool) (r0, r1, c0, c1 int) {
	x1, y1, x2, y2 := float64(box[0]/stride), float64(box[1]/stride), float64(box[2]/stride), float64(box[3]/stride)
	f := math.Ceil
	if round {
		f = math.RoundToEven
	}
	c0, c1 = int(f(x1)), int(f(x2))
	r0, r1 = int(f(y1)), int(f(y2))
	c0, c1 = min(max(c0, 0), wp), min(max(c1, 0), wp)
	r0, r1 = min(max(r0, 0), hp), min(max(r1, 0), hp)
	// A decoded box can be inverted (negative distances): empty crop.
	return r0, max(r1, r0), c0, max(c1, c0)
}

// Logits writes coeffs · proto over the cells [r0, r1) × [c0, c1) into
// dst (row-major over the full hp×wp grid; other cells untouched). proto
// is one image's [nm, hp, wp] prototypes.
func Logits(dst, coeffs, proto []float32, hp, wp, r0, r1, c0, c1 int) {
	hw := hp * wp
	for r := r0; r < r1; r++ {
		row := dst[r*wp+c0 : r*wp+c1]
		clear(row)
		for n, cn := range coeffs {
			pr := proto[n*hw+r*wp+c0 : n*hw+r*wp+c1]
			for i, p := range pr {
				row[i] += cn * p
			}
		}
	}
}

// GridMasks returns the detections' mask probabilities on the prototype
// grid, len(dets)·hp·wp values: sigmoid of the logits inside each crop,
// 0 outside. proto is the image's [nm, hp, wp] prototypes; dst is reused
// when large enough.
func GridMasks(dst []float32, dets []model.Detection, proto []float32, hp, wp int, stride float32) []float32 {
	n := len(dets) * hp * wp
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	clear(dst)
	round := len(dets) < RoundBelow
	for k, d := range dets {
		m := dst[k*hp*wp : (k+1)*hp*wp]
		r0, r1, c0, c1 := CropCells(d.Box, stride, hp, wp, round)
		Logits(m, d.Coeffs, proto, hp, wp, r0, r1, c0, c1)
		for r := r0; r < r1; r++ {
			row := m[r*wp+c0 : r*wp+c1]
			for i, z := range row {
				row[i] = float32(1 / (1 + math.Exp(-float64(z))))
			}
		}
	}
	return dst
}

// Filter keeps the detections with score > conf (they are sorted by
// score, so it is a prefix).
func Filter(dets []model.Detection, conf float32) []model.Detection {
	for i, d := range dets {
		if !(d.Score > conf) {
			return dets[:i]
		}
	}
	return dets
}
