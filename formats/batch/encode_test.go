package batch

import (
	"math/rand/v2"
	"testing"
)

// bruteWindow is the reference: the bounding box of the non-zero cells by
// testing every cell.
func bruteWindow(p []byte, rows, cols int) (x0, y0, w, h int) {
	x0, y0, x1, y1 := cols, rows, -1, -1
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if p[r*cols+c] != 0 {
				x0, y0, x1, y1 = min(x0, c), min(y0, r), max(x1, c), max(y1, r)
			}
		}
	}
	if x1 < 0 {
		return 0, 0, 0, 0
	}
	return x0, y0, x1 - x0 + 1, y1 - y0 + 1
}

func TestTightWindowMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		rows, cols := 1+rng.IntN(70), 1+rng.IntN(70)
		p := make([]byte, rows*cols)
		for k := rng.IntN(6); k > 0; k-- {
			p[rng.IntN(len(p))] = 1
		}
		x, y, w, h := tightWindow(p, rows, cols)
		bx, by, bw, bh := bruteWindow(p, rows, cols)
		if x != bx || y != by || w != bw || h != bh {
			t.Fatalf("%dx%d plane: (%d,%d,%d,%d), brute force (%d,%d,%d,%d)", rows, cols, x, y, w, h, bx, by, bw, bh)
		}
	}
}
