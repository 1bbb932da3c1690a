package raster

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/pipeline/geom"
)

// Every benchmark here runs the brute-force oracle beside the rasteriser,
// so ratios can be read from one run on a noisy machine:
//
//	go test -run '^$' -bench . -benchtime 2s -cpu 1 ./pipeline/raster

var canvas640 = Grid{Rows: 160, Cols: 160, Stride: 4}

// loop runs body b.N times and reports, beside wall-clock ns/op, the
// process CPU time per op (cpu-ns/op) and, when per > 0, wall-clock ns per
// item (ns/<unit>).
func loop(b *testing.B, per int, unit string, body func()) {
	c0, ok := processCPU()
	for b.Loop() {
		body()
	}
	if c1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
	if per > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(per), "ns/"+unit)
	}
}

// cocoLikeRing returns an n-vertex concave outline (radius jittered per
// vertex, as hand-traced COCO outlines are) whose extent is about span px.
func cocoLikeRing(rng *rand.Rand, n int, cx, cy, span float64) []float32 {
	ring := make([]float32, 0, 2*n)
	for i := 0; i < n; i++ {
		a := 2 * math.Pi * (float64(i) + 0.3*rng.Float64()) / float64(n)
		r := span / 2 * (0.65 + 0.35*rng.Float64())
		ring = append(ring, float32(cx+r*math.Cos(a)), float32(cy+r*math.Sin(a)))
	}
	return ring
}

// bruteWindow is the every-edge test limited to the ring's bounding box:
// the method of the reference system, kept as a second baseline.
func bruteWindow(dst []uint8, g Grid, rings [][]float32) {
	clear(dst)
	s := float64(g.Stride)
	for _, ring := range rings {
		b, ok := geom.Bounds(ring)
		if !ok {
			continue
		}
		r0, r1 := firstCell(float64(b.Y0), g.Rows, s), firstCell(float64(b.Y1), g.Rows, s)
		c0, c1 := firstCell(float64(b.X0), g.Cols, s), firstCell(float64(b.X1), g.Cols, s)
		for r := r0; r < r1; r++ {
			py := (float64(r) + 0.5) * s
			for c := c0; c < c1; c++ {
				if bruteInside(ring, (float64(c)+0.5)*s, py) {
					dst[r*g.Cols+c] = 1
				}
			}
		}
	}
}

// BenchmarkSpan: one 23-point ring spanning 30, 60 and 120 px on a
// 640×640 canvas, grid 160×160.
func BenchmarkSpan(b *testing.B) {
	for _, span := range []float64{30, 60, 120} {
		rings := [][]float32{cocoLikeRing(rand.New(rand.NewPCG(1, uint64(span))), 23, 320, 320, span)}
		dst := make([]uint8, canvas640.Cells())
		var z Rasterizer
		b.Run(fmt.Sprintf("%.0fpx/dense", span), func(b *testing.B) {
			loop(b, 0, "", func() { _ = z.Dense(dst, canvas640, rings) })
		})
		b.Run(fmt.Sprintf("%.0fpx/window", span), func(b *testing.B) {
			wins, data := make([]Window, 0, 1), make([]uint8, 0, canvas640.Cells())
			loop(b, 0, "", func() { wins, data, _ = z.AppendWindow(wins[:0], data[:0], canvas640, rings) })
		})
		b.Run(fmt.Sprintf("%.0fpx/brute-bbox", span), func(b *testing.B) {
			loop(b, 0, "", func() { bruteWindow(dst, canvas640, rings) })
		})
		b.Run(fmt.Sprintf("%.0fpx/brute-full", span), func(b *testing.B) {
			loop(b, 0, "", func() { bruteInto(dst, canvas640, rings) })
		})
	}
}

// mosaicBatch builds 64 mosaic-like 640×640 images carrying 2,170
// instances: log-normal sizes (median 36 px, p90 ≈ 140 px: COCO objects at
// the half scale of a 2×2 mosaic), COCO-like vertex counts (median 15,
// mean ≈ 19, p90 ≈ 34), one in ten instances in 2–3 parts, every ring
// clipped to the canvas with geom.ClipRect as the augmenter does.
func mosaicBatch() [][][]float32 {
	rng := rand.New(rand.NewPCG(2026, 11))
	canvas := geom.Rect{X0: 0, Y0: 0, X1: 640, Y1: 640}
	var out [][][]float32
	for len(out) < 2170 {
		parts := 1
		if rng.IntN(10) == 0 {
			parts = 2 + rng.IntN(2)
		}
		size := math.Min(640, 36*math.Exp(1.06*rng.NormFloat64()))
		cx, cy := rng.Float64()*640, rng.Float64()*640
		var rings [][]float32
		for p := 0; p < parts; p++ {
			n := max(4, int(math.Round(15*math.Exp(0.65*rng.NormFloat64()))))
			ring := cocoLikeRing(rng, n, cx+size*(rng.Float64()-0.5), cy+size*(rng.Float64()-0.5), size/float64(parts))
			if clipped := geom.ClipRect(nil, ring, canvas); len(clipped) > 0 {
				rings = append(rings, clipped)
			}
		}
		if len(rings) > 0 {
			out = append(out, rings)
		}
	}
	return out
}

// BenchmarkBatch rasterises the mosaic batch into one dense
// (2170, 160, 160) stack, and into windows, on one core.
func BenchmarkBatch(b *testing.B) {
	batch := mosaicBatch()
	n := len(batch)
	p := canvas640.Cells()
	stack := make([]uint8, n*p)
	var z Rasterizer
	verts := 0
	for _, rings := range batch {
		for _, r := range rings {
			verts += len(r) / 2
		}
	}
	b.Run("dense", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for i, rings := range batch {
				_ = z.Dense(stack[i*p:(i+1)*p], canvas640, rings)
			}
		})
		b.ReportMetric(float64(len(stack)), "dense-bytes/batch")
		b.ReportMetric(float64(verts)/float64(n), "vertices/instance")
	})
	b.Run("clear+fill", func(b *testing.B) {
		// The stack zeroed once, then each instance painted into its plane.
		loop(b, n, "instance", func() {
			clear(stack)
			for i, rings := range batch {
				_ = z.Fill(stack[i*p:(i+1)*p], canvas640, rings)
			}
		})
	})
	wins := make([]Window, 0, n)
	data := make([]uint8, 0, len(stack)/8)
	for _, rings := range batch {
		wins, data, _ = z.AppendWindow(wins, data, canvas640, rings)
	}
	b.Run("window", func(b *testing.B) {
		loop(b, n, "instance", func() {
			wins, data = wins[:0], data[:0]
			for _, rings := range batch {
				wins, data, _ = z.AppendWindow(wins, data, canvas640, rings)
			}
		})
		// Window headers travel too: four int32 each.
		b.ReportMetric(float64(len(data)+16*len(wins)), "window-bytes/batch")
		b.ReportMetric(float64(len(stack))/float64(len(data)+16*len(wins)), "dense/window")
		b.ReportMetric(float64(len(data))/float64(n), "window-cells/instance")
	})
	// The Ultralytics rule on the same batch, beside the exact rule's
	// dense and window runs above.
	zu := Rasterizer{Rule: Ultralytics}
	b.Run("ultralytics/dense", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for i, rings := range batch {
				_ = zu.Dense(stack[i*p:(i+1)*p], canvas640, rings)
			}
		})
	})
	b.Run("ultralytics/window", func(b *testing.B) {
		uw, ud := make([]Window, 0, n), make([]uint8, 0, len(stack)/8)
		loop(b, n, "instance", func() {
			uw, ud = uw[:0], ud[:0]
			for _, rings := range batch {
				uw, ud, _ = zu.AppendWindow(uw, ud, canvas640, rings)
			}
		})
	})
	b.Run("ultralytics/canvas-oracle", func(b *testing.B) {
		// The canvas-size fillPoly and resize, as polygon2mask works.
		loop(b, n, "instance", func() {
			for _, rings := range batch {
				_ = ultraOracle(canvas640, rings)
			}
		})
	})
	b.Run("expand", func(b *testing.B) {
		// The receiving side of the windowed form.
		loop(b, n, "instance", func() {
			if err := Expand(stack, canvas640, wins, data); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("clear-only", func(b *testing.B) {
		// The floor of any dense output: writing the stack's bytes once.
		loop(b, 0, "", func() { clear(stack) })
	})
	b.Run("brute-bbox", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for i, rings := range batch {
				bruteWindow(stack[i*p:(i+1)*p], canvas640, rings)
			}
		})
	})
	b.Run("brute-full", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for i, rings := range batch {
				bruteInto(stack[i*p:(i+1)*p], canvas640, rings)
			}
		})
	})
}

// BenchmarkCocoTiny rasterises every coco-tiny polygon instance
// letterboxed onto a 640×640 canvas (longest side scaled to 640), grid
// 160×160.
func BenchmarkCocoTiny(b *testing.B) {
	polys := loadCocoPolys(b)
	insts := make([][][]float32, len(polys))
	for i, p := range polys {
		s := 640 / float64(max(p.h, p.w))
		m := geom.Translate((640-s*float64(p.w))/2, (640-s*float64(p.h))/2).Mul(geom.Scale(s, s))
		for _, r := range p.rings {
			insts[i] = append(insts[i], m.AppendRing(nil, r))
		}
	}
	n := len(insts)
	dst := make([]uint8, canvas640.Cells())
	var z Rasterizer
	b.Run("dense", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				_ = z.Dense(dst, canvas640, rings)
			}
		})
	})
	b.Run("window", func(b *testing.B) {
		wins, data := make([]Window, 0, 1), make([]uint8, 0, canvas640.Cells())
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				wins, data, _ = z.AppendWindow(wins[:0], data[:0], canvas640, rings)
			}
		})
	})
	zu := Rasterizer{Rule: Ultralytics}
	b.Run("ultralytics/dense", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				_ = zu.Dense(dst, canvas640, rings)
			}
		})
	})
	b.Run("ultralytics/window", func(b *testing.B) {
		wins, data := make([]Window, 0, 1), make([]uint8, 0, canvas640.Cells())
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				wins, data, _ = zu.AppendWindow(wins[:0], data[:0], canvas640, rings)
			}
		})
	})
	b.Run("brute-bbox", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				bruteWindow(dst, canvas640, rings)
			}
		})
	})
	b.Run("brute-full", func(b *testing.B) {
		loop(b, n, "instance", func() {
			for _, rings := range insts {
				bruteInto(dst, canvas640, rings)
			}
		})
	})
}

// decodeBitmap expands column-major RLE counts into a row-major bitmap:
// the first step of the naive crowd baseline.
func decodeBitmap(dst []uint8, rle RLE) {
	clear(dst)
	pos := 0
	for i, c := range rle.Counts {
		if i&1 == 1 {
			for k := pos; k < pos+int(c); k++ {
				dst[(k%rle.H)*rle.W+k/rle.H] = 1
			}
		}
		pos += int(c)
	}
}

// BenchmarkCrowdRLE maps a 640×480 crowd RLE covering about a third of
// the image onto the 160×160 grid of a letterboxed canvas. The baseline
// decodes the whole mask and samples every cell.
func BenchmarkCrowdRLE(b *testing.B) {
	h, w := 480, 640
	bitmap := make([]uint8, h*w)
	rng := rand.New(rand.NewPCG(9, 9))
	for k := 0; k < 40; k++ {
		x0, y0 := rng.IntN(w-60), rng.IntN(h-60)
		for y := y0; y < y0+20+rng.IntN(40); y++ {
			for x := x0; x < x0+20+rng.IntN(40); x++ {
				bitmap[y*w+x] = 1
			}
		}
	}
	rle := encodeRLE(h, w, bitmap)
	m := geom.Translate(0, 80)
	dst := make([]uint8, canvas640.Cells())
	var z Rasterizer
	b.Run("dense", func(b *testing.B) {
		loop(b, 0, "", func() { _ = z.DenseRLE(dst, canvas640, rle, m) })
	})
	b.Run("brute", func(b *testing.B) {
		scratch := make([]uint8, h*w)
		loop(b, 0, "", func() {
			decodeBitmap(scratch, rle)
			_ = bruteRLE(canvas640, h, w, scratch, m)
		})
	})
}
