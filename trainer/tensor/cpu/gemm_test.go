package cpu

import (
	"fmt"
	"github.com/segpipe/segpipe/internal/cputime"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// TestSgemmMatchesNaive covers every transpose combination, edge tiles
// (sizes not multiples of the micro-tile or block), k spanning several KC
// panels, alpha/beta, batching and a broadcast operand.
func TestSgemmMatchesNaive(t *testing.T) {
	kernels := append([]microKernel{goKernel}, simdKernels()...)
	defer func() { kern = microKernel{} }()
	for _, k := range kernels {
		kern = k
		t.Run(k.name, testSgemmMatchesNaive)
	}
}

func testSgemmMatchesNaive(t *testing.T) {
	shapes := [][3]int{{1, 1, 1}, {3, 5, 2}, {4, 4, 4}, {7, 9, 13}, {65, 257, 3}, {64, 256, 256}, {70, 33, 600}, {130, 300, 77},
		{100, 290, 270}, {13, 270, 40}}
	r := rand.New(rand.NewPCG(1, 2))
	for si, sh := range shapes {
		// Single products take the shared pre-packed A path when C has
		// several column tiles; batched ones pack per tile.
		batch := 1 + si%2
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
					g := backend.Gemm{TransA: ta, TransB: tb, M: sh[0], N: sh[1], K: sh[2], Alpha: ab[0], Beta: ab[1],
						Batch: batch, StrideA: sh[0] * sh[2], StrideB: sh[1] * sh[2], StrideC: sh[0] * sh[1]}
					a := randSlice(r, batch*sh[0]*sh[2])
					b := randSlice(r, batch*sh[1]*sh[2])
					c := randSlice(r, batch*sh[0]*sh[1])
					want := append([]float32(nil), c...)
					NaiveSgemm(g, a, b, want)
					(&Kernels{Workers: 3}).Sgemm(g, a, b, c)
					for i := range c {
						tol := 1e-5 * float64(sh[2]+1) * 4
						if d := math.Abs(float64(c[i] - want[i])); d > tol {
							t.Fatalf("%v ta=%v tb=%v alpha/beta=%v: element %d = %v, want %v", sh, ta, tb, ab, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
	// Beta = 0 must ignore C entirely, NaNs included (PyTorch semantics).
	{
		g := backend.Gemm{M: 7, N: 19, K: 300, Alpha: 1}
		a, b := randSlice(r, 7*300), randSlice(r, 300*19)
		c, want := make([]float32, 7*19), make([]float32, 7*19)
		for i := range c {
			c[i] = float32(math.NaN())
		}
		NaiveSgemm(g, a, b, want)
		(&Kernels{}).Sgemm(g, a, b, c)
		for i := range c {
			if math.Abs(float64(c[i]-want[i])) > 1e-4 {
				t.Fatalf("beta 0 over NaN: element %d = %v, want %v", i, c[i], want[i])
			}
		}
	}
	// A zero stride shares B across the batch.
	g := backend.Gemm{M: 5, N: 6, K: 7, Alpha: 1, Batch: 3, StrideA: 35, StrideB: 0, StrideC: 30}
	a, b := randSlice(r, 105), randSlice(r, 42)
	c, want := make([]float32, 90), make([]float32, 90)
	NaiveSgemm(g, a, b, want)
	(&Kernels{}).Sgemm(g, a, b, c)
	for i := range c {
		if math.Abs(float64(c[i]-want[i])) > 1e-5 {
			t.Fatalf("shared B: element %d = %v, want %v", i, c[i], want[i])
		}
	}
}

func TestPickKernelPrefersLessPadding(t *testing.T) {
	if kern.fn != nil {
		t.Fatal("a kernel is forced outside tests")
	}
	for _, c := range []struct{ m, n int }{{16, 6400}, {64, 6400}, {1, 1}, {4096, 4096}} {
		k := pickKernel(c.m, c.n)
		area := func(k microKernel) float64 {
			return float64((c.m+k.mr-1)/k.mr*k.mr) * float64((c.n+k.nr-1)/k.nr*k.nr) / k.speed
		}
		for _, o := range append(simdKernels(), goKernel) {
			if area(o) < area(k) {
				t.Errorf("%dx%d: picked %s, but %s is cheaper", c.m, c.n, k.name, o.name)
			}
		}
	}
}

// TestImplicitColumnsMatchIm2col checks the implicit-GEMM gatherer against
// the explicit im2col it replaces, row by row and from odd offsets.
func TestImplicitColumnsMatchIm2col(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, p := range []backend.Conv{
		{N: 1, InC: 3, InH: 7, InW: 6, OutC: 1, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 1},
		{N: 1, InC: 2, InH: 9, InW: 8, OutC: 1, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 1},
		{N: 1, InC: 2, InH: 5, InW: 7, OutC: 1, KH: 5, KW: 5, Stride: 1, Pad: 2, Groups: 1},
		{N: 1, InC: 1, InH: 6, InW: 6, OutC: 1, KH: 2, KW: 2, Stride: 2, Pad: 0, Groups: 1},
		{N: 1, InC: 1, InH: 3, InW: 4, OutC: 1, KH: 3, KW: 3, Stride: 3, Pad: 2, Groups: 1},
	} {
		L := p.OutH() * p.OutW()
		kk := p.InC * p.KH * p.KW
		x := randSlice(r, p.InC*p.InH*p.InW)
		col := make([]float32, kk*L)
		im2col(p, x, col)
		for row := 0; row < kk; row++ {
			for l0 := 0; l0 < L; l0 += 1 + l0%3 {
				n := min(L-l0, 1+(row+l0)%11)
				got := make([]float32, n)
				colRow(p, x, row, l0, got)
				for i, v := range got {
					if v != col[row*L+l0+i] {
						t.Fatalf("%+v row %d from %d: [%d] = %v, want %v", p, row, l0, i, v, col[row*L+l0+i])
					}
				}
			}
		}
	}
}

// TestConvBackwardIsAdjoint checks <conv(x), dy> = <x, BackwardData(dy)>
// and = <w, BackwardFilter(x, dy)> on shapes that take each code path
// (im2col, pointwise, depthwise, grouped, parallel samples).
func TestConvBackwardIsAdjoint(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range []backend.Conv{
		{N: 3, InC: 5, InH: 7, InW: 6, OutC: 4, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 1},
		{N: 1, InC: 6, InH: 9, InW: 9, OutC: 6, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 6},
		{N: 4, InC: 8, InH: 5, InW: 5, OutC: 16, KH: 1, KW: 1, Stride: 1, Pad: 0, Groups: 1},
		{N: 2, InC: 8, InH: 6, InW: 7, OutC: 4, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 2},
		{N: 2, InC: 6, InH: 6, InW: 7, OutC: 4, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 2},
		{N: 1, InC: 3, InH: 6, InW: 5, OutC: 5, KH: 3, KW: 3, Stride: 1, Pad: 0, Groups: 1},
		{N: 1, InC: 3, InH: 5, InW: 5, OutC: 2, KH: 2, KW: 2, Stride: 1, Pad: 0, Groups: 1},
		{N: 1, InC: 40, InH: 9, InW: 8, OutC: 100, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 1},
		{N: 2, InC: 5, InH: 7, InW: 45, OutC: 5, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 5},
	} {
		// Worker counts below, equal to and above the batch cover every
		// split of samples and GEMM workers.
		for _, nw := range []int{1, 2, 5} {
			t.Run(fmt.Sprintf("%+v workers=%d", p, nw), func(t *testing.T) {
				be := &Kernels{Workers: nw}
				L := p.OutH() * p.OutW()
				x := randSlice(r, p.N*p.InC*p.InH*p.InW)
				w := randSlice(r, p.OutC*p.InC/p.Groups*p.KH*p.KW)
				dy := randSlice(r, p.N*p.OutC*L)
				y := make([]float32, len(dy))
				be.Conv2d(p, x, w, y)
				dx := make([]float32, len(x))
				dw := make([]float32, len(w))
				be.Conv2dBackwardData(p, dy, w, dx)
				be.Conv2dBackwardFilter(p, x, dy, dw)
				dot := func(a, b []float32) (s float64) {
					for i := range a {
						s += float64(a[i]) * float64(b[i])
					}
					return s
				}
				lhs := dot(y, dy)
				for name, rhs := range map[string]float64{"data": dot(x, dx), "filter": dot(w, dw)} {
					if math.Abs(lhs-rhs) > 1e-4*(1+math.Abs(lhs)) {
						t.Errorf("%s adjoint: <conv x, dy> = %v, <., backward> = %v", name, lhs, rhs)
					}
				}
			})
		}
	}
}

// BenchmarkSgemm reports GFLOP/s for the blocked parallel GEMM, the same on
// one goroutine, the portable Go micro-kernel on one goroutine, and the
// naive triple loop, in one run. KernelName tells which kernel "blocked" is.
func BenchmarkSgemm(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{128, 256, 512} {
		a, bb, c := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
		g := backend.Gemm{M: n, N: n, K: n, Alpha: 1}
		flops := 2 * float64(n) * float64(n) * float64(n)
		// GFLOP/s per CPU-second is the rate a core achieves while it runs,
		// which a loaded machine distorts far less than the wall-clock rate.
		meter := func(b *testing.B) func() {
			cpu := cputime.Meter(func(s float64) { b.ReportMetric(flops*float64(b.N)/s/1e9, "GFLOP/cpu-s") })
			return func() {
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				cpu()
			}
		}
		b.Run(fmt.Sprintf("blocked-parallel/%d", n), func(b *testing.B) {
			be := &Kernels{}
			done := meter(b)
			for b.Loop() {
				be.Sgemm(g, a, bb, c)
			}
			done()
		})
		b.Run(fmt.Sprintf("blocked-1thread/%d", n), func(b *testing.B) {
			be := &Kernels{Workers: 1}
			done := meter(b)
			for b.Loop() {
				be.Sgemm(g, a, bb, c)
			}
			done()
		})
		for _, k := range append([]microKernel{goKernel}, simdKernels()...) {
			b.Run(fmt.Sprintf("blocked-1thread-%s/%d", k.name, n), func(b *testing.B) {
				kern = k
				defer func() { kern = microKernel{} }()
				be := &Kernels{Workers: 1}
				done := meter(b)
				for b.Loop() {
					be.Sgemm(g, a, bb, c)
				}
				done()
			})
		}
		if n <= 256 {
			b.Run(fmt.Sprintf("naive/%d", n), func(b *testing.B) {
				done := meter(b)
				for b.Loop() {
					NaiveSgemm(g, a, bb, c)
				}
				done()
			})
		}
	}
}

// BenchmarkConv times forward, backward-data and backward-filter on layer
// shapes from yolo26n-seg at 640 input, batch 2 (per-image work scales
// linearly).
func BenchmarkConv(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		name string
		p    backend.Conv
	}{
		{"3x3s1 c64 80x80", backend.Conv{N: 2, InC: 64, InH: 80, InW: 80, OutC: 64, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 1}},
		{"3x3s2 c32-64 160x160", backend.Conv{N: 2, InC: 32, InH: 160, InW: 160, OutC: 64, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 1}},
		{"1x1 c128-64 40x40", backend.Conv{N: 2, InC: 128, InH: 40, InW: 40, OutC: 64, KH: 1, KW: 1, Stride: 1, Pad: 0, Groups: 1}},
		{"dw3x3 c64 80x80", backend.Conv{N: 2, InC: 64, InH: 80, InW: 80, OutC: 64, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 64}},
	}
	for _, c := range cases {
		p := c.p
		L := p.OutH() * p.OutW()
		x := randSlice(r, p.N*p.InC*p.InH*p.InW)
		w := randSlice(r, p.OutC*p.InC/p.Groups*p.KH*p.KW)
		y := make([]float32, p.N*p.OutC*L)
		dx, dw := make([]float32, len(x)), make([]float32, len(w))
		flops := 2 * float64(p.N*p.OutC*L) * float64(p.InC/p.Groups*p.KH*p.KW)
		be := &Kernels{}
		col := make([]float32, p.InC/p.Groups*p.KH*p.KW*L)
		type run struct {
			name string
			fn   func()
		}
		runs := []run{{"fwd", func() { be.Conv2d(p, x, w, y) }}}
		if p.Groups == 1 && p.KH > 1 {
			// Baseline: the same forward through an explicit im2col buffer.
			runs = append(runs, run{"fwd-explicit-im2col", func() {
				kk := p.InC * p.KH * p.KW
				for n := 0; n < p.N; n++ {
					im2col(p, x[n*p.InC*p.InH*p.InW:], col)
					be.Sgemm(backend.Gemm{M: p.OutC, N: L, K: kk, Alpha: 1}, w, col, y[n*p.OutC*L:])
				}
			}})
		}
		for _, k := range append(runs, []run{
			{"bwd-data", func() { be.Conv2dBackwardData(p, y, w, dx) }},
			{"bwd-filter", func() { be.Conv2dBackwardFilter(p, x, y, dw) }},
		}...) {
			b.Run(c.name+"/"+k.name, func(b *testing.B) {
				done := cputime.Meter(func(s float64) { b.ReportMetric(s*1e3/float64(b.N), "cpu-ms/op") })
				for b.Loop() {
					k.fn()
				}
				done()
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
