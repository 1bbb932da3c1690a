package synth

import (
	"image"
	"image/color"
	"math"
	"math/rand/v2"
)

// easyCategories are an Easy set's classes, each drawn with its own
// outline in its own colour (easyColors) so that either cue alone tells
// them apart.
var easyCategories = []category{
	{1, "disc", "shape"}, {2, "square", "shape"}, {3, "triangle", "shape"}, {4, "cross", "shape"},
}

var easyColors = []color.RGBA{
	{230, 70, 60, 255}, {60, 120, 235, 255}, {240, 210, 50, 255}, {70, 200, 90, 255},
}

func easyColor(k int) color.RGBA { return easyColors[k] }

// categories is the set's category table; shape.cat indexes it.
func (c Config) categories() []category {
	if c.Easy {
		return easyCategories[:c.Classes]
	}
	return cocoCategories
}

// easyShapes draws 1–3 shapes, each inside its own circle of radius 14–26 %
// of the shorter side; circles that would meet are redrawn (a few times,
// then the shape is left out), so no shape hides part of another.
func easyShapes(r *rand.Rand, classes, w, h int) []shape {
	short := float64(min(w, h))
	type disc struct{ x, y, rad float64 }
	var placed []disc
	var out []shape
	n := 1 + r.IntN(3)
	for range n {
		cat := r.IntN(classes)
		rad := short * (0.14 + 0.12*r.Float64())
		rot := r.Float64() * 2 * math.Pi
		for range 20 {
			d := disc{rad + r.Float64()*(float64(w)-2*rad), rad + r.Float64()*(float64(h)-2*rad), rad}
			free := true
			for _, p := range placed {
				if math.Hypot(d.x-p.x, d.y-p.y) < d.rad+p.rad+0.02*short {
					free = false
					break
				}
			}
			if !free {
				continue
			}
			placed = append(placed, d)
			s := shape{cat: cat, rings: [][]float64{outline(cat, d.x, d.y, d.rad, rot, w, h)}}
			s.measure()
			out = append(out, s)
			break
		}
	}
	return out
}

// outline is category cat's polygon inscribed in the circle (cx, cy, rad),
// turned by rot.
func outline(cat int, cx, cy, rad, rot float64, w, h int) []float64 {
	var pts [][2]float64 // unit circle coordinates before rotation
	switch easyCategories[cat].name {
	case "disc":
		for k := range 36 {
			a := 2 * math.Pi * float64(k) / 36
			pts = append(pts, [2]float64{math.Cos(a), math.Sin(a)})
		}
	case "square", "triangle":
		n := 4
		if easyCategories[cat].name == "triangle" {
			n = 3
		}
		for k := range n {
			a := 2 * math.Pi * float64(k) / float64(n)
			pts = append(pts, [2]float64{math.Cos(a), math.Sin(a)})
		}
	case "cross":
		// Arms of half-width a reaching the circle: a² + l² = 1.
		a := 0.3
		l := math.Sqrt(1 - a*a)
		pts = [][2]float64{{a, -l}, {a, -a}, {l, -a}, {l, a}, {a, a}, {a, l}, {-a, l}, {-a, a}, {-l, a}, {-l, -a}, {-a, -a}, {-a, -l}}
	}
	sin, cos := math.Sincos(rot)
	ring := make([]float64, 0, 2*len(pts))
	for _, p := range pts {
		x := cx + rad*(p[0]*cos-p[1]*sin)
		y := cy + rad*(p[0]*sin+p[1]*cos)
		ring = append(ring, clamp(round2(x), 0, float64(w)), clamp(round2(y), 0, float64(h)))
	}
	return ring
}

// easyBackground fills img with one dull colour (a grey with a slight
// tint), far from every category's saturated colour.
func easyBackground(img *image.RGBA, r *rand.Rand) {
	g := 40 + r.IntN(100)
	c := [3]uint8{uint8(g + r.IntN(21) - 10), uint8(g + r.IntN(21) - 10), uint8(g + r.IntN(21) - 10)}
	w, h := img.Rect.Dx(), img.Rect.Dy()
	for y := range h {
		row := img.Pix[y*img.Stride:]
		for x := range w {
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = c[0], c[1], c[2], 255
		}
	}
}
