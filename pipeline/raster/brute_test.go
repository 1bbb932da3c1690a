package raster

import (
	"math"
	"math/rand/v2"
)

// bruteDense is the test oracle: every cell against every edge of every
// ring, with the formula of the package doc written out literally.
func bruteDense(g Grid, rings [][]float32) []uint8 {
	out := make([]uint8, g.Cells())
	bruteInto(out, g, rings)
	return out
}

// bruteInto is bruteDense into a caller buffer, for benchmarks.
func bruteInto(out []uint8, g Grid, rings [][]float32) {
	clear(out)
	s := float64(g.Stride)
	for r := 0; r < g.Rows; r++ {
		py := (float64(r) + 0.5) * s
		for c := 0; c < g.Cols; c++ {
			px := (float64(c) + 0.5) * s
			for _, ring := range rings {
				if bruteInside(ring, px, py) {
					out[r*g.Cols+c] = 1
					break
				}
			}
		}
	}
}

func bruteInside(ring []float32, px, py float64) bool {
	n := len(ring) / 2
	inside := false
	for i := 0; i < n; i++ {
		j := (i + 1) % n
		x0, y0 := float64(ring[2*i]), float64(ring[2*i+1])
		x1, y1 := float64(ring[2*j]), float64(ring[2*j+1])
		if (y0 > py) != (y1 > py) && px < x0+(py-y0)*(x1-x0)/(y1-y0) {
			inside = !inside
		}
	}
	return inside
}

// tightWindow derives the expected window and bytes from a dense mask.
func tightWindow(g Grid, dense []uint8) (Window, []uint8) {
	r0, r1, c0, c1 := g.Rows, -1, g.Cols, -1
	for r := 0; r < g.Rows; r++ {
		for c := 0; c < g.Cols; c++ {
			if dense[r*g.Cols+c] != 0 {
				r0, r1, c0, c1 = min(r0, r), max(r1, r), min(c0, c), max(c1, c)
			}
		}
	}
	if r1 < 0 {
		return Window{}, nil
	}
	w := Window{X0: int32(c0), Y0: int32(r0), W: int32(c1 - c0 + 1), H: int32(r1 - r0 + 1)}
	var b []uint8
	for r := r0; r <= r1; r++ {
		b = append(b, dense[r*g.Cols+c0:r*g.Cols+c1+1]...)
	}
	return w, b
}

// genInstance draws one instance of a randomly chosen kind on grid g. The
// kinds are the cases where a fast rasteriser tends to differ from the
// formula: exact centre rows and columns, horizontal edges, collinear and
// repeated vertices, self-intersection, rings off the canvas, extremes.
func genInstance(rng *rand.Rand, g Grid) [][]float32 {
	W, H := float64(g.Cols*g.Stride), float64(g.Rows*g.Stride)
	s := float64(g.Stride)
	parts := 1
	if rng.IntN(4) == 0 {
		parts = 1 + rng.IntN(8)
	}
	rings := make([][]float32, parts)
	for p := range rings {
		kind := rng.IntN(12)
		// centre and size: mostly on canvas, sometimes off it or huge/tiny
		cx := W * (rng.Float64()*1.4 - 0.2)
		cy := H * (rng.Float64()*1.4 - 0.2)
		size := math.Max(W, H) * math.Exp(rng.Float64()*4-3)
		switch rng.IntN(10) {
		case 0:
			size = s * rng.Float64() // smaller than a cell
		case 1:
			size = math.Max(W, H) * (1 + 20*rng.Float64()) // beyond the canvas
		case 2:
			cx, cy = -cx-1, -cy-1 // negative coordinates
		}
		n := 3 + rng.IntN(30)
		if rng.IntN(10) == 0 {
			n = rng.IntN(3) // degenerate: empty, one or two vertices
		}
		ring := make([]float32, 0, 2*n+1)
		for i := 0; i < n; i++ {
			var x, y float64
			switch kind {
			case 0, 1: // convex-ish: angles in order, near-constant radius
				a := 2 * math.Pi * (float64(i) + rng.Float64()*0.5) / float64(n)
				x, y = cx+size*math.Cos(a), cy+size*math.Sin(a)
			case 2, 3: // concave star
				a := 2 * math.Pi * float64(i) / float64(n)
				rad := size * (0.2 + rng.Float64())
				x, y = cx+rad*math.Cos(a), cy+rad*math.Sin(a)
			default: // self-intersecting: vertices anywhere in the box
				x, y = cx+size*(rng.Float64()-0.5), cy+size*(rng.Float64()-0.5)
			}
			ring = append(ring, float32(x), float32(y))
		}
		snap := rng.IntN(6)
		for i := 0; i+1 < len(ring); i += 2 {
			x, y := float64(ring[i]), float64(ring[i+1])
			switch snap {
			case 0: // vertices exactly on cell centres
				x = (math.Round(x/s-0.5) + 0.5) * s
				y = (math.Round(y/s-0.5) + 0.5) * s
			case 1: // on cell-centre rows only
				y = (math.Round(y/s-0.5) + 0.5) * s
			case 2: // integer pixel corners (COCO-like), hits centres at s odd
				x, y = math.Round(x), math.Round(y)
			case 3: // quarter pixels
				x, y = math.Round(x*4)/4, math.Round(y*4)/4
			}
			ring[i], ring[i+1] = float32(x), float32(y)
		}
		if len(ring) >= 4 && rng.IntN(4) == 0 { // horizontal and vertical edges
			for i := 2; i+1 < len(ring); i += 4 {
				if rng.IntN(2) == 0 {
					ring[i+1] = ring[i-1]
				} else {
					ring[i] = ring[i-2]
				}
			}
		}
		if len(ring) >= 4 && rng.IntN(5) == 0 { // duplicate and collinear vertices
			i := 2 * rng.IntN(len(ring)/2)
			j := (i + 2) % len(ring)
			mx, my := (ring[i]+ring[j])/2, (ring[i+1]+ring[j+1])/2
			ring = append(ring, 0, 0, 0, 0)
			copy(ring[i+6:], ring[i+2:len(ring)-4])
			ring[i+2], ring[i+3], ring[i+4], ring[i+5] = mx, my, mx, my
		}
		if rng.IntN(20) == 0 { // trailing odd coordinate is ignored
			ring = append(ring, float32(cx))
		}
		rings[p] = ring
	}
	return rings
}

func genGrid(rng *rand.Rand) Grid {
	strides := []int{1, 2, 3, 4, 4, 4, 8}
	return Grid{Rows: 1 + rng.IntN(40), Cols: 1 + rng.IntN(40), Stride: strides[rng.IntN(len(strides))]}
}
