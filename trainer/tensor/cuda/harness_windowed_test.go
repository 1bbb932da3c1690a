package cuda

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// randomWindows draws n windows on a rows×cols grid — empty ones, the
// whole grid, windows clipped at each edge and corner of the grid, and
// interior ones — and their {0,1} bytes.
func randomWindows(rng *rand.Rand, n, rows, cols int) ([]raster.Window, []byte) {
	var wins []raster.Window
	var data []byte
	for range n {
		w, h := 1+rng.IntN(cols), 1+rng.IntN(rows)
		x0, y0 := rng.IntN(cols-w+1), rng.IntN(rows-h+1)
		switch rng.IntN(6) {
		case 0:
			w, h, x0, y0 = 0, 0, 0, 0
		case 1:
			w, h, x0, y0 = cols, rows, 0, 0
		case 2: // clipped at the right and bottom edges
			x0, y0 = cols-w, rows-h
		case 3: // at the top-left corner
			x0, y0 = 0, 0
		case 4: // one row or column along an edge
			if rng.IntN(2) == 0 {
				h, y0 = 1, rows-1
			} else {
				w, x0 = 1, cols-1
			}
		}
		wins = append(wins, raster.Window{X0: int32(x0), Y0: int32(y0), W: int32(w), H: int32(h)})
		for range w * h {
			data = append(data, byte(rng.IntN(2)))
		}
	}
	return wins, data
}

func windowValues(wins []raster.Window) []int32 {
	var v []int32
	for _, w := range wins {
		v = append(v, w.X0, w.Y0, w.W, w.H)
	}
	return v
}

// TestExpandWindowsOnHarness: the Backend's device expansion of windowed
// masks (backend.WindowExpander) against the host expansion,
// raster.Expand, on random grids and windows, edge-clipped ones included:
// the dense stacks are equal byte for byte, and windows the host refuses
// (outside the grid, data too short or too long) are refused too.
func TestExpandWindowsOnHarness(t *testing.T) {
	be, _ := newHarnessBackend(t)
	cases := 80
	if testing.Short() {
		cases = 30
	}
	checkExpandWindows(t, be, cases, 24)
}

// checkExpandWindows runs cases random window sets on grids of up to
// maxSide cells a side through be's device expansion and raster.Expand.
func checkExpandWindows(t *testing.T, be *Backend, cases, maxSide int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(31, 7))
	refused := 0
	for c := range cases {
		rows, cols, n := 1+rng.IntN(maxSide), 1+rng.IntN(maxSide), rng.IntN(9)
		wins, data := randomWindows(rng, n, rows, cols)
		if c%7 == 6 && n > 0 { // a case the host refuses
			k := rng.IntN(n)
			switch rng.IntN(3) {
			case 0:
				wins[k].X0 = int32(cols) - wins[k].W + 1
			case 1:
				data = append(data, 1)
			case 2:
				wins[k].H = int32(rows) + 1
			}
		}
		g := raster.Grid{Rows: rows, Cols: cols, Stride: 4}
		want := make([]byte, n*rows*cols)
		hostErr := raster.Expand(want, g, wins, data)
		table, err := be.WindowTable(nil, windowValues(wins), rows, cols, len(data))
		if (err != nil) != (hostErr != nil) {
			t.Fatalf("case %d: device table error %v, host expansion error %v", c, err, hostErr)
		}
		if err != nil {
			refused++
			continue
		}
		up := func(b []byte) backend.Buffer {
			buf := be.Alloc(max((len(b)+3)/4, 1)).Slice(0, (len(b)+3)/4)
			be.UploadBytes(buf, b)
			return buf
		}
		dst := be.Alloc(max((len(want)+3)/4, 1))
		be.Fill(dst, math.Float32frombits(0xffffffff)) // 0xFF bytes: a skipped one shows
		be.ExpandWindows(n, rows, cols, up(table), up(data), dst)
		got := make([]float32, dst.Len)
		be.Download(got, dst)
		if g := toBytes(got)[:len(want)]; !bytes.Equal(g, want) {
			t.Fatalf("case %d (%d masks on %dx%d, windows %v): device expansion differs from raster.Expand", c, n, rows, cols, wins)
		}
	}
	if refused == 0 {
		t.Fatal("no refused case was drawn")
	}
	t.Logf("%d random window sets on random grids, %d refused by both", cases, refused)
}
