package geom_test

import (
	"fmt"

	"github.com/segpipe/segpipe/pipeline/geom"
)

// An augmentation step: scale a ring about the origin, move it, clip it to
// the 640×640 canvas and take the box the instance keeps.
func ExampleClipRect() {
	ring := []float32{100, 100, 400, 120, 380, 300, 120, 280}
	m := geom.Translate(300, -50).Mul(geom.Scale(1.2, 1.2))
	moved := m.AppendRing(nil, ring)

	canvas := geom.Rect{X0: 0, Y0: 0, X1: 640, Y1: 640}
	clipped := geom.ClipRect(nil, moved, canvas)
	box, _ := geom.Bounds(clipped)
	fmt.Println("moved:  ", moved)
	fmt.Println("clipped:", clipped)
	fmt.Printf("box %v, area %.0f -> %.0f px²\n", box, geom.Area(moved), geom.Area(clipped))
	// Output:
	// moved:   [420 70 780 94 756 310 444 286]
	// clipped: [420 70 640 84.666664 640 301.07693 444 286]
	// box {420 70 640 301.07693}, area 72576 -> 44792 px²
}
