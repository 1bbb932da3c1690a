package raster

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// picture renders a dense mask as rows of '#' (ON) and '.' (OFF).
func picture(g Grid, m []uint8) []string {
	rows := make([]string, g.Rows)
	for r := range rows {
		var b strings.Builder
		for _, v := range m[r*g.Cols : (r+1)*g.Cols] {
			if v != 0 {
				b.WriteByte('#')
			} else {
				b.WriteByte('.')
			}
		}
		rows[r] = b.String()
	}
	return rows
}

// The expected cells are cv2.fillPoly on the np.int32 vertices and
// cv2.resize (INTER_LINEAR) of opencv-python 5.1, as Ultralytics'
// polygon2mask computes them (one fillPoly per ring for several).
func TestUltralyticsRuleCases(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name      string
		w, h, s   int
		rings     [][]float32
		want      []string
		wantExact []string // the exact rule's cells, where the contrast is the point
	}{
		{"integer square covers the same cells as the exact rule", 16, 16, 4,
			[][]float32{{4, 4, 12, 4, 12, 12, 4, 12}},
			[]string{"....", ".##.", ".##.", "...."}, []string{"....", ".##.", ".##.", "...."}},
		{"boundary pixels grow the mask and two of four sampled pixels round up", 16, 16, 4,
			[][]float32{{3, 3, 9, 3, 9, 9, 3, 9}},
			[]string{"....", ".##.", ".#..", "...."}, []string{"....", ".#..", "....", "...."}},
		{"vertices are truncated toward zero", 16, 16, 4,
			[][]float32{{3.9, 3.9, 9.9, 3.9, 9.9, 9.9, 3.9, 9.9}},
			[]string{"....", ".##.", ".#..", "...."}, nil},
		{"negative coordinates truncate up to zero", 16, 16, 4,
			[][]float32{{-0.9, -0.9, 5.5, -0.9, 5.5, 5.5, -0.9, 5.5}},
			[]string{"##..", "#...", "....", "...."}, nil},
		{"a single vertex is one pixel, under the two needed", 16, 16, 4,
			[][]float32{{6, 6}},
			[]string{"....", "....", "....", "...."}, nil},
		{"two vertices draw a line", 16, 16, 4,
			[][]float32{{5, 5, 6, 5}},
			[]string{"....", ".#..", "....", "...."}, []string{"....", "....", "....", "...."}},
		{"triangle", 24, 24, 4,
			[][]float32{{2, 2, 21, 7, 9, 20}},
			[]string{"......", ".####.", ".####.", "..##..", "..#...", "......"}, nil},
		{"an edge entering from off the canvas is clipped as OpenCV clips it", 16, 16, 4,
			[][]float32{{-20, 2, 15, 9, -20, 12}},
			[]string{"....", "#...", "####", "...."}, nil},
		{"a sliver off the right edge", 16, 16, 4,
			[][]float32{{13, -5, 40, 20, 14, 22}},
			[]string{"...#", "...#", "...#", "...#"}, nil},
		{"overlapping rings are a union", 16, 16, 4,
			[][]float32{{1, 1, 10, 1, 10, 10, 1, 10}, {5, 5, 14, 5, 14, 14, 5, 14}},
			[]string{"###.", "####", "####", ".###"}, nil},
		{"a ring with a NaN is dropped, the others kept", 16, 16, 4,
			[][]float32{{4, 4, 12, 4, nan, 12, 4, 12}, {3, 3, 9, 3, 9, 9, 3, 9}},
			[]string{"....", ".##.", ".#..", "...."}, nil},
		{"self-intersecting bow tie", 16, 16, 4,
			[][]float32{{1, 1, 14, 14, 14, 1, 1, 14}},
			[]string{"#..#", "####", "####", "#..#"}, nil},
		{"stride 2 reads the 2x2 block (INTER_AREA)", 12, 12, 2,
			[][]float32{{2.5, 1, 10, 4, 4, 10}},
			[]string{".#....", ".###..", ".####.", ".###..", "..#...", "......"}, nil},
		{"stride 3 reads the centre pixel", 12, 12, 3,
			[][]float32{{2.5, 1, 10, 4, 4, 10}},
			[]string{"....", ".###", ".##.", ".#.."}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGrid(tc.w, tc.h, tc.s)
			if err != nil {
				t.Fatal(err)
			}
			z := Rasterizer{Rule: Ultralytics}
			dst := make([]uint8, g.Cells())
			if err := z.Dense(dst, g, tc.rings); err != nil {
				t.Fatal(err)
			}
			if got := picture(g, dst); !slices.Equal(got, tc.want) {
				t.Errorf("ultralytics cells\n got %q\nwant %q", got, tc.want)
			}
			if got := picture(g, ultraOracle(g, tc.rings)); !slices.Equal(got, tc.want) {
				t.Errorf("canvas oracle\n got %q\nwant %q", got, tc.want)
			}
			if tc.wantExact != nil {
				var ze Rasterizer
				if err := ze.Dense(dst, g, tc.rings); err != nil {
					t.Fatal(err)
				}
				if got := picture(g, dst); !slices.Equal(got, tc.wantExact) {
					t.Errorf("exact cells\n got %q\nwant %q", got, tc.wantExact)
				}
			}
		})
	}
}

// ultraOracle is the Ultralytics rule the slow way, close to OpenCV's own
// structure: a canvas-size bitmap, every line drawn pixel by pixel, every
// canvas row filled by an active edge list stepped x += dx row by row,
// then the resize's sampled pixels counted per cell.
func ultraOracle(g Grid, rings [][]float32) []uint8 {
	s := g.Stride
	w, h := g.Cols*s, g.Rows*s
	canvas := make([]uint8, w*h)
	var z Rasterizer
	z.ultraPoints(rings)
	for i, off := range z.ringOff {
		end := len(z.pts)
		if i+1 < len(z.ringOff) {
			end = z.ringOff[i+1]
		}
		pts := z.pts[off:end]
		n := len(pts) / 2
		type edge struct{ y0, y1, x, dx int64 }
		var edges []edge
		px, py := pts[2*n-2], pts[2*n-1]
		for k := 0; k < n; k++ {
			cx, cy := pts[2*k], pts[2*k+1]
			oracleLine(canvas, w, h, px, py, cx, cy)
			if py != cy {
				t0x, t0y, t1x, t1y := px, py, cx, cy
				c0y, c1y := py, cy
				if t0x < 0 || t1x < 0 || t0y < 0 || t1y < 0 || t0x >= int64(w) || t1x >= int64(w) || t0y >= int64(h) || t1y >= int64(h) {
					clipLine(int64(w), int64(h), &t0x, &t0y, &t1x, &t1y)
					if t0y != t1y {
						c0y, c1y = t0y, t1y
					}
				}
				dx := (t1x<<16 - t0x<<16) / (c1y - c0y)
				if py < cy {
					edges = append(edges, edge{py, cy, t0x<<16 + (py-c0y)*dx, dx})
				} else {
					edges = append(edges, edge{cy, py, t1x<<16 + (cy-c1y)*dx, dx})
				}
			}
			px, py = cx, cy
		}
		if len(edges) < 2 {
			continue
		}
		ylo := edges[0].y0
		for _, e := range edges {
			ylo = min(ylo, e.y0)
		}
		// Rows above the canvas draw nothing: start the stepping at row 0
		// with every edge where OpenCV's stepping would have brought it.
		ylo = max(ylo, 0)
		xs := make([]int64, len(edges))
		for k, e := range edges {
			xs[k] = e.x + max(ylo-e.y0, 0)*e.dx
		}
		for y := ylo; y < int64(h); y++ {
			var act []int64
			for k, e := range edges {
				if e.y0 <= y && y < e.y1 {
					act = append(act, xs[k])
					xs[k] += e.dx
				}
			}
			slices.Sort(act)
			for p := 0; p+1 < len(act); p += 2 {
				x1, x2 := (act[p]+0xffff)>>16, act[p+1]>>16
				for x := max(x1, 0); x <= min(x2, int64(w)-1); x++ {
					canvas[y*int64(w)+x] = 1
				}
			}
		}
	}
	out := make([]uint8, g.Cells())
	h0, k := ultraSample(int64(s))
	for r := 0; r < g.Rows; r++ {
		for c := 0; c < g.Cols; c++ {
			n := 0
			for dy := int64(0); dy < k; dy++ {
				for dx := int64(0); dx < k; dx++ {
					n += int(canvas[(int64(r*s)+h0+dy)*int64(w)+int64(c*s)+h0+dx])
				}
			}
			if 4*n >= 2*int(k*k) {
				out[r*g.Cols+c] = 1
			}
		}
	}
	return out
}

// oracleLine draws OpenCV's 8-connected line iterator's pixels.
func oracleLine(canvas []uint8, w, h int, x1, y1, x2, y2 int64) {
	if x1 < 0 || x2 < 0 || y1 < 0 || y2 < 0 || x1 >= int64(w) || x2 >= int64(w) || y1 >= int64(h) || y2 >= int64(h) {
		if !clipLine(int64(w), int64(h), &x1, &y1, &x2, &y2) {
			return
		}
	}
	if x2 < x1 {
		x1, y1, x2, y2 = x2, y2, x1, y1
	}
	dx, dy := x2-x1, y2-y1
	sy := int64(1)
	if dy < 0 {
		dy, sy = -dy, -1
	}
	major, minor := dx, dy
	if dy > dx {
		major, minor = dy, dx
	}
	e := major - 2*minor
	x, y := x1, y1
	for i := int64(0); i <= major; i++ {
		canvas[y*int64(w)+x] = 1
		step := e < 0
		e -= 2 * minor
		if step {
			e += 2 * major
		}
		if dy > dx {
			y += sy
			if step {
				x++
			}
		} else {
			x++
			if step {
				y += sy
			}
		}
	}
}

// ultraCheck rasterises with the Ultralytics rule through Dense, Fill and
// AppendWindow+Expand and reports where they disagree with each other or
// with the canvas oracle.
func ultraCheck(z *Rasterizer, g Grid, rings [][]float32) error {
	z.Rule = Ultralytics
	dense := make([]uint8, g.Cells())
	if err := z.Dense(dense, g, rings); err != nil {
		return err
	}
	fill := make([]uint8, g.Cells())
	if err := z.Fill(fill, g, rings); err != nil {
		return err
	}
	wins, data, err := z.AppendWindow(nil, nil, g, rings)
	if err != nil {
		return err
	}
	exp := make([]uint8, g.Cells())
	if err := Expand(exp, g, wins, data); err != nil {
		return err
	}
	if w := wins[0]; w.Size() > 0 {
		tw, _ := tightWindow(g, dense)
		if tw != w {
			return errors.New("window is not tight: " + diffPicture(g, exp, dense))
		}
	}
	switch {
	case !bytes.Equal(fill, dense):
		return errors.New("Fill differs from Dense:\n" + diffPicture(g, fill, dense))
	case !bytes.Equal(exp, dense):
		return errors.New("windowed differs from Dense:\n" + diffPicture(g, exp, dense))
	}
	if want := ultraOracle(g, rings); !bytes.Equal(dense, want) {
		return errors.New("differs from the canvas oracle:\n" + diffPicture(g, dense, want))
	}
	return nil
}

func TestUltralyticsRuleMatchesCanvasOracleOnRandomInstances(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	var z Rasterizer
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := 0; i < n; i++ {
		g := genGrid(rng)
		if g.Cols*g.Stride > 2048 || g.Rows*g.Stride > 2048 {
			continue // the oracle's canvas
		}
		rings := genInstance(rng, g)
		if err := ultraCheck(&z, g, rings); err != nil {
			t.Fatalf("case %d grid %+v rings %v: %v", i, g, rings, err)
		}
	}
}

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rule
		err  bool
	}{
		{"", Exact, false}, {"exact", Exact, false}, {"ultralytics", Ultralytics, false},
		{"Ultralytics", Exact, true}, {"centre", Exact, true},
	} {
		got, err := ParseRule(tc.in)
		if (err != nil) != tc.err || got != tc.want || (err != nil && !errors.Is(err, ErrRule)) {
			t.Errorf("ParseRule(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil && tc.in != "" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	z := Rasterizer{Rule: Rule(7)}
	g := Grid{Rows: 2, Cols: 2, Stride: 4}
	if err := z.Dense(make([]uint8, 4), g, [][]float32{{0, 0, 8, 0, 8, 8}}); !errors.Is(err, ErrRule) {
		t.Errorf("Dense with rule 7: %v, want ErrRule", err)
	}
	z.Rule = Ultralytics
	big := Grid{Rows: 1, Cols: 1 << 23, Stride: 4}
	if _, _, err := z.AppendWindow(nil, nil, big, [][]float32{{0, 0, 8, 0, 8, 8}}); !errors.Is(err, ErrGrid) {
		t.Errorf("AppendWindow on a canvas over 2^24 px: %v, want ErrGrid", err)
	}
}

func TestUltralyticsSteadyStateAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	rings := [][]float32{cocoLikeRing(rng, 60, 320, 320, 300), cocoLikeRing(rng, 12, 100, 500, 40)}
	z := Rasterizer{Rule: Ultralytics}
	dst := make([]uint8, canvas640.Cells())
	wins := make([]Window, 0, 4)
	data := make([]uint8, 0, canvas640.Cells())
	run := func() {
		if err := z.Dense(dst, canvas640, rings); err != nil {
			t.Fatal(err)
		}
		var err error
		if _, _, err = z.AppendWindow(wins[:0], data[:0], canvas640, rings); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := testing.AllocsPerRun(20, run); a != 0 {
		t.Errorf("%v allocations per run, want 0", a)
	}
}

// FuzzUltralyticsWindowedMatchesDense holds the windowed form of the
// Ultralytics rule to its dense form (and both to the canvas oracle) on
// any float input, NaN and infinities included.
func FuzzUltralyticsWindowedMatchesDense(f *testing.F) {
	f.Add(uint8(8), uint8(8), uint8(4), []byte{3, 3, 9, 3, 9, 9, 3, 9})
	f.Add(uint8(5), uint8(7), uint8(2), []byte{0, 0, 255, 10, 3, 200, 128, 1})
	f.Add(uint8(3), uint8(3), uint8(3), []byte{6, 6})
	f.Fuzz(func(t *testing.T, rows, cols, stride uint8, raw []byte) {
		g := Grid{Rows: int(rows % 40), Cols: int(cols % 40), Stride: int(stride%8) + 1}
		// Vertices from bytes: a byte is a coordinate from -20 to
		// g's side + 20 in quarter pixels; 0xff is NaN, 0xfe +Inf, 0xfd
		// a huge negative.
		var rings [][]float32
		ring := []float32{}
		side := float32(max(g.Rows, g.Cols) * g.Stride)
		for _, b := range raw {
			var v float32
			switch b {
			case 0xff:
				v = float32(math.NaN())
			case 0xfe:
				v = float32(math.Inf(1))
			case 0xfd:
				v = -3e9
			case 0xfc:
				rings = append(rings, ring)
				ring = []float32{}
				continue
			default:
				v = -20 + float32(b)/252*(side+40)
			}
			ring = append(ring, v)
		}
		rings = append(rings, ring)
		var z Rasterizer
		if err := ultraCheck(&z, g, rings); err != nil {
			t.Fatalf("grid %+v rings %v: %v", g, rings, err)
		}
	})
}
