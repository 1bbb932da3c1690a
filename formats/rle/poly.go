package rle

import (
	"fmt"
	"math"
	"slices"
)

// MaxCoord bounds the absolute value of polygon and box coordinates.
// rleFrPoly walks the boundary at 5× resolution, so its cost grows with the
// perimeter; coordinates beyond this are corrupt data, not images.
const MaxCoord = 1 << 20

// FromPolygon rasterises one polygon given as [x0, y0, x1, y1, ...] onto an
// h×w image exactly as rleFrPoly does. An odd trailing number is dropped
// (as frPyObjects does). A polygon with fewer than two vertices is empty.
func FromPolygon(xy []float64, h, w int) (RLE, error) {
	var s polyScratch
	return s.fromPolygon(xy, h, w)
}

// FromPolygons rasterises every part and merges them by union, as
// COCO.annToRLE does for a polygon annotation.
func FromPolygons(polys [][]float64, h, w int) (RLE, error) {
	var s polyScratch
	parts := make([]RLE, 0, len(polys))
	for i, p := range polys {
		r, err := s.fromPolygon(p, h, w)
		if err != nil {
			return RLE{}, fmt.Errorf("polygon %d: %w", i, err)
		}
		parts = append(parts, r)
	}
	if len(parts) == 0 {
		// frPyObjects of an empty list yields no RLE and merge of none an
		// empty 0×0 RLE, which no image matches; an empty h×w mask is the
		// useful equivalent.
		return RLE{H: h, W: w, Counts: []uint32{uint32(h * w)}}, nil
	}
	return Merge(parts)
}

// FromBox rasterises an [x, y, w, h] box as rleFrBbox does: as the polygon
// of its four corners.
func FromBox(box [4]float64, h, w int) (RLE, error) {
	xs, ys := box[0], box[1]
	xe, ye := float64(xs+box[2]), float64(ys+box[3])
	return FromPolygon([]float64{xs, ys, xs, ye, xe, ye, xe, ys}, h, w)
}

type polyScratch struct {
	x, y []int
	a    []uint32
}

func (s *polyScratch) fromPolygon(xy []float64, h, w int) (RLE, error) {
	if h < 0 || w < 0 || int64(h)*int64(w) > math.MaxUint32 {
		return RLE{}, fmt.Errorf("image size [%d, %d] out of range", h, w)
	}
	k := len(xy) / 2
	for i, v := range xy[:2*k] {
		if math.IsNaN(v) || math.Abs(v) > MaxCoord {
			return RLE{}, fmt.Errorf("coordinate %d is %v, want finite within ±%d", i, v, MaxCoord)
		}
	}
	const scale = 5.0
	x, y := s.x[:0], s.y[:0]
	for j := 0; j < k; j++ {
		x = append(x, int(float64(scale*xy[2*j])+.5))
		y = append(y, int(float64(scale*xy[2*j+1])+.5))
	}
	a := s.a[:0]
	if k > 0 {
		x = append(x, x[0])
		y = append(y, y[0])
		// Walk the dense 5× boundary point by point, as the reference
		// materialises it, but keep only the previous point: a crossing
		// depends on consecutive points alone.
		var pu, pv int
		first := true
		emit := func(u, v int) {
			if first {
				first = false
				pu, pv = u, v
				return
			}
			if u != pu {
				xu := u - 1
				if u < pu {
					xu = u
				}
				xd := (float64(xu)+.5)/scale - .5
				if math.Floor(xd) == xd && xd >= 0 && xd <= float64(w-1) {
					yv := pv
					if v < pv {
						yv = v
					}
					yd := (float64(yv)+.5)/scale - .5
					if yd < 0 {
						yd = 0
					} else if yd > float64(h) {
						yd = float64(h)
					}
					yd = math.Ceil(yd)
					a = append(a, uint32(int(xd)*h+int(yd)))
				}
			}
			pu, pv = u, v
		}
		for j := 0; j < k; j++ {
			xs, xe, ys, ye := x[j], x[j+1], y[j], y[j+1]
			dx, dy := absInt(xe-xs), absInt(ys-ye)
			flip := (dx >= dy && xs > xe) || (dx < dy && ys > ye)
			if flip {
				xs, xe = xe, xs
				ys, ye = ye, ys
			}
			if dx >= dy {
				var sl float64
				if dx != 0 {
					sl = float64(ye-ys) / float64(dx)
				} else {
					// A repeated vertex: C computes 0/0 = NaN and stores a
					// garbage y for this single point, but its x equals
					// both neighbours', so it can never form a crossing and
					// the y is never read. Any slope gives the same mask.
					sl = 0
				}
				for d := 0; d <= dx; d++ {
					t := d
					if flip {
						t = dx - d
					}
					emit(t+xs, int(float64(ys)+float64(sl*float64(t))+.5))
				}
			} else {
				sl := float64(xe-xs) / float64(dy)
				for d := 0; d <= dy; d++ {
					t := d
					if flip {
						t = dy - d
					}
					emit(int(float64(xs)+float64(sl*float64(t))+.5), t+ys)
				}
			}
		}
	}
	a = append(a, uint32(h*w))
	slices.Sort(a)
	var p uint32
	for j := range a {
		t := a[j]
		a[j] -= p
		p = t
	}
	b := make([]uint32, 0, len(a))
	j := 0
	b = append(b, a[j])
	j++
	for j < len(a) {
		if a[j] > 0 {
			b = append(b, a[j])
			j++
		} else {
			j++
			if j < len(a) {
				b[len(b)-1] += a[j]
				j++
			}
		}
	}
	s.x, s.y, s.a = x, y, a
	return RLE{H: h, W: w, Counts: b}, nil
}

func absInt(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
