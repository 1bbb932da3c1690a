package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// A backendCase calls Backend methods through a backendRun and returns
// the buffers to compare with the CPU backend's: every method of
// backend.Backend is covered, with the accumulate-into semantics of the
// backward kernels (outputs start non-zero), absent optional buffers, and
// outputs that start as NaN where a kernel must not read them.
type backendCase struct {
	name  string
	exact bool // integer outputs or pure data movement: bit for bit
	run   func(r *backendRun) []backend.Buffer
}

// backendRun draws the same inputs on any backend from one seed.
type backendRun struct {
	be  backend.Backend
	rng *rand.Rand
}

func (r *backendRun) up(x []float32) backend.Buffer {
	b := r.be.Alloc(len(x))
	r.be.Upload(b, x)
	return b
}

// rand returns n uniform values in [lo, hi), quantised to 1/8 when ties
// is set (so max pooling and Maximum see equal operands).
func (r *backendRun) rand(n int, lo, hi float64, ties bool) backend.Buffer {
	x := make([]float32, n)
	for i := range x {
		v := lo + (hi-lo)*r.rng.Float64()
		if ties {
			v = math.Round(v*8) / 8
		}
		x[i] = float32(v)
	}
	return r.up(x)
}

func (r *backendRun) randn(n int) backend.Buffer { return r.rand(n, -1, 1, false) }

// nan returns n NaNs: an output a kernel must overwrite without reading.
func (r *backendRun) nan(n int) backend.Buffer {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return r.up(x)
}

// bnAct runs fused where r.be implements backend.BatchNormActivator;
// elsewhere (the reference) it runs separate with z, the pre-activation,
// and dz, its zero-filled gradient, after zero-filling dx when write is
// set, as the tape does for a gradient's first writer. With BNIdentity
// separate must write y and read dy as z and dz.
func (r *backendRun) bnAct(act backend.BNAct, write bool, fused func(backend.BatchNormActivator), separate func(z, dz backend.Buffer), nx int, y, dy, dx backend.Buffer) {
	if f, ok := r.be.(backend.BatchNormActivator); ok {
		fused(f)
		return
	}
	if write {
		r.be.Fill(dx, 0)
	}
	if act == backend.BNIdentity {
		separate(y, dy)
		return
	}
	z, dz := r.be.Alloc(nx), r.be.Alloc(nx)
	r.be.Fill(dz, 0)
	separate(z, dz)
}

// silu writes y = silu(z) and adds its gradient for dy into dz (for
// BNSiLU; BNIdentity's z and dz are y and dy already).
func (r *backendRun) silu(act backend.BNAct, z, y, dy, dz backend.Buffer) {
	if act == backend.BNIdentity {
		return
	}
	r.be.Unary(backend.SiLU, z, y)
	r.be.UnaryBackward(backend.SiLU, z, y, dy, dz)
}

func backendCases() []backendCase {
	var cs []backendCase
	add := func(name string, exact bool, run func(r *backendRun) []backend.Buffer) {
		cs = append(cs, backendCase{name, exact, run})
	}
	for _, g := range []backend.Gemm{
		{M: 5, N: 7, K: 3, Alpha: 1},
		{TransA: true, M: 4, N: 6, K: 5, Alpha: 0.5, Beta: 1},
		{TransB: true, M: 3, N: 8, K: 4, Alpha: 1, Beta: 0.25},
		{TransA: true, TransB: true, M: 6, N: 2, K: 7, Alpha: -1},
		{M: 3, N: 4, K: 5, Alpha: 1, Batch: 3, StrideA: 15, StrideB: 0, StrideC: 12},
		{TransB: true, M: 2, N: 3, K: 4, Alpha: 1, Beta: 1, Batch: 2, StrideA: 8, StrideB: 12, StrideC: 6},
	} {
		add("sgemm", false, func(r *backendRun) []backend.Buffer {
			b := max(g.Batch, 1)
			na, nb := g.M*g.K+(b-1)*g.StrideA, g.K*g.N+(b-1)*g.StrideB
			nc := g.M*g.N + (b-1)*g.StrideC
			c := r.randn(nc)
			if g.Beta == 0 {
				c = r.nan(nc)
			}
			r.be.Sgemm(g, r.randn(na), r.randn(nb), c)
			return []backend.Buffer{c}
		})
	}
	for _, p := range []backend.Conv{
		{N: 2, InC: 3, InH: 7, InW: 6, OutC: 4, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{N: 1, InC: 4, InH: 8, InW: 8, OutC: 6, KH: 3, KW: 3, Stride: 2, Pad: 1, Groups: 2},
		{N: 2, InC: 5, InH: 6, InW: 5, OutC: 5, KH: 3, KW: 3, Stride: 1, Pad: 1, Groups: 5},
		{N: 2, InC: 3, InH: 4, InW: 4, OutC: 2, KH: 1, KW: 1},
	} {
		q := p.Norm()
		nx, nw, ny := q.N*q.InC*q.InH*q.InW, q.OutC*q.InC/q.Groups*q.KH*q.KW, q.N*q.OutC*q.OutH()*q.OutW()
		add("conv2d", false, func(r *backendRun) []backend.Buffer {
			x, w, y := r.randn(nx), r.randn(nw), r.nan(ny)
			r.be.Conv2d(p, x, w, y)
			return []backend.Buffer{y}
		})
		// Written (cuDNN's beta 0; the CPU zero-fills and adds): dx
		// starts as NaN, which must not be read.
		add("conv2d backward data, written", false, func(r *backendRun) []backend.Buffer {
			w, dy := r.randn(nw), r.randn(ny)
			dx := r.nan(nx)
			r.be.Conv2dBackwardDataWrite(p, dy, w, dx)
			return []backend.Buffer{dx}
		})
		add("conv2d backward", false, func(r *backendRun) []backend.Buffer {
			x, w, dy := r.randn(nx), r.randn(nw), r.randn(ny)
			dx, dw := r.randn(nx), r.randn(nw)
			r.be.Conv2dBackwardData(p, dy, w, dx)
			r.be.Conv2dBackwardFilter(p, x, dy, dw)
			r.be.Conv2dBackwardData(p, dy, w, dx) // twice: the second adds to the first
			return []backend.Buffer{dx, dw}
		})
	}
	type bn struct {
		n, c, hw           int
		affine, unbiased   bool
		dx, dgamma, dbeta_ bool
	}
	for _, s := range []bn{
		{2, 3, 10, true, true, true, true, true},
		{3, 4, 1, false, true, true, false, true},
		{1, 2, 1, true, true, false, true, false}, // a single element per channel: NaN unbiased variance
		{2, 5, 7, true, false, true, true, false},
	} {
		nx := s.n * s.c * s.hw
		opt := func(r *backendRun, on bool, b func() backend.Buffer) backend.Buffer {
			if !on {
				return backend.Buffer{}
			}
			return b()
		}
		add("batch-norm train", false, func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, 2, 4, false) // |mean| > std
			gamma := opt(r, s.affine, func() backend.Buffer { return r.rand(s.c, 0.5, 1.5, false) })
			beta := opt(r, s.affine, func() backend.Buffer { return r.randn(s.c) })
			y, mean, invstd := r.nan(nx), r.nan(s.c), r.nan(s.c)
			vu := opt(r, s.unbiased, func() backend.Buffer { return r.nan(s.c) })
			r.be.BatchNormTrain(s.n, s.c, s.hw, 1e-3, x, gamma, beta, y, mean, invstd, vu)
			dy := r.randn(nx)
			dx := opt(r, s.dx, func() backend.Buffer { return r.randn(nx) })
			dg := opt(r, s.dgamma, func() backend.Buffer { return r.randn(s.c) })
			db := opt(r, s.dbeta_, func() backend.Buffer { return r.randn(s.c) })
			r.be.BatchNormBackward(s.n, s.c, s.hw, x, dy, mean, invstd, gamma, dx, dg, db)
			out := []backend.Buffer{y, mean, invstd}
			for _, b := range []backend.Buffer{vu, dx, dg, db} {
				if b.Present() {
					out = append(out, b)
				}
			}
			return out
		})
		add("batch-norm eval", false, func(r *backendRun) []backend.Buffer {
			x := r.randn(nx)
			gamma := opt(r, s.affine, func() backend.Buffer { return r.rand(s.c, 0.5, 1.5, false) })
			beta := opt(r, s.affine, func() backend.Buffer { return r.randn(s.c) })
			mean, variance := r.randn(s.c), r.rand(s.c, 0.5, 2, false)
			y := r.nan(nx)
			r.be.BatchNormEval(s.n, s.c, s.hw, 1e-3, x, gamma, beta, mean, variance, y)
			dy := r.randn(nx)
			dx := opt(r, s.dx, func() backend.Buffer { return r.randn(nx) })
			dg := opt(r, s.dgamma, func() backend.Buffer { return r.randn(s.c) })
			db := opt(r, s.dbeta_, func() backend.Buffer { return r.randn(s.c) })
			r.be.BatchNormEvalBackward(s.n, s.c, s.hw, 1e-3, x, dy, gamma, mean, variance, dx, dg, db)
			out := []backend.Buffer{y}
			for _, b := range []backend.Buffer{dx, dg, db} {
				if b.Present() {
					out = append(out, b)
				}
			}
			return out
		})
	}
	// Batch-norm with its activation in the same passes and the input
	// gradient written by its first writer (backend.BatchNormActivator),
	// against batch-norm, SiLU and their backwards on the CPU backend.
	for _, s := range []struct {
		n, c, hw int
		act      backend.BNAct
		write    bool
	}{
		{2, 3, 10, backend.BNSiLU, true},
		{3, 4, 7, backend.BNSiLU, false},
		{2, 5, 9, backend.BNIdentity, true},
		{1, 2, 33, backend.BNSiLU, true},
	} {
		nx := s.n * s.c * s.hw
		p := backend.BN{N: s.n, C: s.c, HW: s.hw, Eps: 1e-3, Momentum: 0.03, Act: s.act}
		add(fmt.Sprintf("batch-norm train, activation %d, write %v", s.act, s.write), false, func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, -1, 3, false)
			gamma, beta := r.rand(s.c, 0.5, 1.5, false), r.randn(s.c)
			y, mean, invstd := r.nan(nx), r.nan(s.c), r.nan(s.c)
			rm, rv := r.randn(s.c), r.rand(s.c, 0.5, 2, false)
			dy, dg, db := r.randn(nx), r.randn(s.c), r.randn(s.c)
			dx := r.randn(nx)
			if s.write {
				dx = r.nan(nx)
			}
			r.bnAct(s.act, s.write, func(fused backend.BatchNormActivator) {
				affine := r.nan(2 * s.c)
				fused.BatchNormTrainAct(p, x, gamma, beta, y, mean, invstd, affine, rm, rv)
				fused.BatchNormBackwardAct(p, x, dy, mean, invstd, gamma, affine, dx, dg, db, s.write)
			}, func(z, dz backend.Buffer) {
				vu := r.be.Alloc(s.c)
				r.be.BatchNormTrain(s.n, s.c, s.hw, 1e-3, x, gamma, beta, z, mean, invstd, vu)
				r.be.Axpby(p.Momentum, mean, 1-p.Momentum, rm)
				r.be.Axpby(p.Momentum, vu, 1-p.Momentum, rv)
				r.silu(s.act, z, y, dy, dz)
				r.be.BatchNormBackward(s.n, s.c, s.hw, x, dz, mean, invstd, gamma, dx, dg, db)
			}, nx, y, dy, dx)
			return []backend.Buffer{y, mean, invstd, rm, rv, dx, dg, db}
		})
		add(fmt.Sprintf("batch-norm eval, activation %d, write %v", s.act, s.write), false, func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, -2, 2, false)
			gamma, beta := r.rand(s.c, 0.5, 1.5, false), r.randn(s.c)
			mean, variance := r.randn(s.c), r.rand(s.c, 0.5, 2, false)
			y, dy, dg, db := r.nan(nx), r.randn(nx), r.randn(s.c), r.randn(s.c)
			dx := r.randn(nx)
			if s.write {
				dx = r.nan(nx)
			}
			r.bnAct(s.act, s.write, func(fused backend.BatchNormActivator) {
				fused.BatchNormEvalAct(p, x, gamma, beta, mean, variance, y)
				fused.BatchNormEvalBackwardAct(p, x, dy, gamma, beta, mean, variance, dx, dg, db, s.write)
			}, func(z, dz backend.Buffer) {
				r.be.BatchNormEval(s.n, s.c, s.hw, 1e-3, x, gamma, beta, mean, variance, z)
				r.silu(s.act, z, y, dy, dz)
				r.be.BatchNormEvalBackward(s.n, s.c, s.hw, 1e-3, x, dz, gamma, mean, variance, dx, dg, db)
			}, nx, y, dy, dx)
			return []backend.Buffer{y, dx, dg, db}
		})
	}
	add("channel affine and sum", false, func(r *backendRun) []backend.Buffer {
		n, c, hw := 2, 3, 5
		x, scale, shift := r.randn(n*c*hw), r.randn(c), r.randn(c)
		y := r.nan(n * c * hw)
		r.be.ChannelAffine(n, c, hw, x, scale, shift, y)
		r.be.ChannelAffine(n, c, hw, x, backend.Buffer{}, shift, x) // a bias add, in place
		s := r.randn(c)
		r.be.ChannelSum(n, c, hw, y, s)
		total := r.randn(1)
		r.be.ChannelSum(1, 1, n*c*hw, x, total)
		return []backend.Buffer{y, x, s, total}
	})
	for _, p := range []backend.Pool{
		{N: 2, C: 2, H: 6, W: 5, K: 3, Stride: 1, Pad: 1},
		{N: 1, C: 3, H: 8, W: 8, K: 2, Stride: 2},
		{N: 1, C: 2, H: 9, W: 7, K: 5, Stride: 1, Pad: 2},
	} {
		nx, ny := p.N*p.C*p.H*p.W, p.N*p.C*p.OutH()*p.OutW()
		add("max pool", true, func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, -1, 1, true) // ties: the first in row-major window order wins
			y, arg := r.nan(ny), r.nan(ny)
			r.be.MaxPool2d(p, x, y, arg)
			dx := r.rand(nx, -1, 1, true)
			r.be.MaxPool2dBackward(p, r.rand(ny, -1, 1, true), arg, dx)
			return []backend.Buffer{y, arg, dx}
		})
	}
	add("upsample", false, func(r *backendRun) []backend.Buffer {
		p := backend.Upsample{Planes: 3, H: 3, W: 4, Factor: 2}
		nx, ny := 3*3*4, 3*6*8
		y, dx := r.nan(ny), r.randn(nx)
		r.be.UpsampleNearest(p, r.randn(nx), y)
		r.be.UpsampleNearestBackward(p, r.randn(ny), dx)
		return []backend.Buffer{y, dx}
	})
	add("softmax", false, func(r *backendRun) []backend.Buffer {
		outer, n, inner := 2, 5, 3
		x, y, dx := r.rand(outer*n*inner, -4, 4, false), r.nan(outer*n*inner), r.randn(outer*n*inner)
		r.be.Softmax(outer, n, inner, x, y)
		r.be.SoftmaxBackward(outer, n, inner, y, r.randn(outer*n*inner), dx)
		return []backend.Buffer{y, dx}
	})
	for f := range backend.Unary(len(unaryNames)) {
		add("unary", false, func(r *backendRun) []backend.Buffer {
			lo := -3.0
			if f == backend.Log || f == backend.Sqrt {
				lo = 0.1
			}
			x, y, dx := r.rand(50, lo, 3, false), r.nan(50), r.randn(50)
			r.be.Unary(f, x, y)
			r.be.UnaryBackward(f, x, y, r.randn(50), dx)
			return []backend.Buffer{y, dx}
		})
	}
	for f := backend.Add; f <= backend.Minimum; f++ {
		// a is 2×3×4, b per channel (1×3×1) broadcast over it.
		s := backend.Broadcast{Shape: []int{2, 3, 4}, StrideA: []int{12, 4, 1}, StrideB: []int{0, 1, 0}}
		add("binary", false, func(r *backendRun) []backend.Buffer {
			a, b := r.rand(24, -2, 2, true), r.rand(3, 0.5, 2, true)
			y, da, db := r.nan(24), r.randn(24), r.randn(3)
			r.be.Binary(f, s, a, b, y)
			r.be.BinaryBackward(f, s, a, b, r.randn(24), da, db)
			r.be.BinaryBackward(f, s, a, b, r.randn(24), backend.Buffer{}, db)
			return []backend.Buffer{y, da, db}
		})
	}
	add("fill and axpby", false, func(r *backendRun) []backend.Buffer {
		a, b, c, d := r.nan(9), r.nan(9), r.randn(9), r.randn(9)
		r.be.Fill(a, 2.5)
		r.be.Axpby(3, r.randn(9), 0, b) // beta 0 never reads the NaNs
		r.be.Axpby(0.5, r.randn(9), 1, c)
		r.be.Axpby(-1, r.randn(9), 0.25, d)
		return []backend.Buffer{a, b, c, d}
	})
	add("copy", true, func(r *backendRun) []backend.Buffer {
		x := r.randn(24)
		perm := r.nan(24) // 2×3×4 → 4×2×3
		r.be.Copy(backend.Strided{Shape: []int{4, 2, 3}, Src: []int{1, 12, 4}, Dst: []int{6, 3, 1}}, x, perm)
		cat := r.nan(40) // x as rows of 4 into the first columns of rows of 5, then a column of 1s
		r.be.Copy(backend.Strided{Shape: []int{6, 4}, Src: []int{4, 1}, Dst: []int{5, 1}}, x, cat)
		r.be.Copy(backend.Strided{Shape: []int{6}, Src: []int{0}, Dst: []int{5}}, r.up([]float32{1}), cat.From(4))
		r.be.Copy(backend.Strided{Shape: []int{2, 5}, Src: []int{0, 0}, Dst: []int{5, 1}}, r.up([]float32{-1}), cat.From(30))
		bcast := r.randn(24) // += a per-channel vector broadcast over 2×3×4
		r.be.Copy(backend.Strided{Shape: []int{2, 3, 4}, Src: []int{0, 1, 0}, Dst: []int{12, 4, 1}, Accumulate: true}, r.randn(3), bcast)
		return []backend.Buffer{perm, cat, bcast}
	})
	add("copy sums", false, func(r *backendRun) []backend.Buffer {
		// Axis sums through zero destination strides, as tensor's Sum ops
		// walk them (outer, n, inner) → (outer, inner), accumulating.
		x := r.randn(2 * 5 * 3)
		s := r.randn(2 * 3)
		r.be.Copy(backend.Strided{Shape: []int{2, 5, 3}, Src: []int{15, 3, 1}, Dst: []int{3, 0, 1}, Accumulate: true}, x, s)
		all := r.randn(1)
		r.be.Copy(backend.Strided{Shape: []int{30}, Src: []int{1}, Dst: []int{0}, Accumulate: true}, x, all)
		last := r.nan(3) // without accumulate the walk's last value stays
		r.be.Copy(backend.Strided{Shape: []int{10, 3}, Src: []int{3, 1}, Dst: []int{0, 1}}, x, last)
		return []backend.Buffer{s, all, last}
	})
	add("bytes to float", true, func(r *backendRun) []backend.Buffer {
		px := make([]byte, 4*5)
		for i := range px {
			px[i] = byte(r.rng.IntN(256))
		}
		src := r.be.Alloc(5)
		r.be.UploadBytes(src, px[:19]) // bytes keep their order; a partial last element is fine
		dst := r.nan(19)
		r.be.BytesToFloat(1.0/255, src, dst)
		return []backend.Buffer{dst}
	})
	return cs
}

// TestBackendOnHarness runs every backend.Backend method of cuda.Backend
// on the CPU harness (the .cu kernels under g++, naive GEMM and
// convolution stand-ins) against the CPU backend. It checks the Backend's
// Go code, not a GPU.
func TestBackendOnHarness(t *testing.T) {
	be, e := newHarnessBackend(t)
	be.k.bnTile = 4 // several tiles per channel for the small cases
	compareBackendCases(t, be, 1e-5, true)
	// Four convolution shapes were planned once each, whatever the passes.
	if e.plans != 4 || be.planned.Load() != 4 {
		t.Errorf("%d convolution plans made (%d cached), want 4: the plan cache is per shape", e.plans, be.planned.Load())
	}
	tr := be.Transfers()
	if tr.Uploads == 0 || tr.Downloads == 0 || tr.Syncs != 0 {
		t.Errorf("transfers %+v: want counted uploads and downloads and no sync", tr)
	}
	// With the GPU's tile length these small channels take the
	// one-block-per-channel kernels.
	be.k.bnTile = 0
	compareBackendCases(t, be, 1e-5, true)
}

// openGPUBackend opens GPU 0 as a Backend (TF32 off) or skips the test.
func openGPUBackend(t *testing.T) *Backend {
	t.Helper()
	be, err := NewBackend(0, Options{})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	return be
}

// TestBackendOnGPU runs the same cases on GPU 0 (cuBLAS, cuDNN and the
// PTX kernels) at 1e-3 with TF32 off, logging each method's worst error.
func TestBackendOnGPU(t *testing.T) {
	compareBackendCases(t, openGPUBackend(t), 1e-3, true)
}

// compareBackendCases runs backendCases on be and on the CPU backend and
// compares every output: exact cases bit for bit, the others within rtol
// (relative, with an absolute floor of rtol/10).
func compareBackendCases(t *testing.T, be backend.Backend, rtol float64, logWorst bool) {
	compareCases(t, be, backendCases(), rtol, logWorst)
}

// h200Blocks is the grid cap an H200 gets (132 SMs × 8, NewBackend's
// maxBlocks).
const h200Blocks = 132 * 8

// largeCases are tensors big enough for the GPU's launch geometry to
// matter: grid-stride loops that go round more than once at h200Blocks ×
// 256 threads, and batch-norm channels of several 4,096-element tiles.
func largeCases() []backendCase {
	var cs []backendCase
	add := func(name string, run func(r *backendRun) []backend.Buffer) {
		cs = append(cs, backendCase{name, false, run})
	}
	big := 2*h200Blocks*blockSize + 77
	add("large unary", func(r *backendRun) []backend.Buffer {
		x, y, dx := r.randn(big), r.nan(big), r.randn(big)
		r.be.Unary(backend.SiLU, x, y)
		r.be.UnaryBackward(backend.SiLU, x, y, r.randn(big), dx)
		return []backend.Buffer{y, dx}
	})
	add("large channel sum", func(r *backendRun) []backend.Buffer {
		x, total := r.randn(big), r.randn(1)
		r.be.ChannelSum(1, 1, big, x, total)
		s := r.randn(3)
		r.be.ChannelSum(2, 3, big/6, x, s)
		return []backend.Buffer{total, s}
	})
	for _, hw := range []int{64 * 64, 80*80 + 3} { // 2 and ~3.2 tiles per channel at n 2
		n, c := 2, 3
		nx := n * c * hw
		add(fmt.Sprintf("large batch-norm, %d per channel", n*hw), func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, 2, 4, false)
			gamma, beta := r.rand(c, 0.5, 1.5, false), r.randn(c)
			y, mean, invstd, vu := r.nan(nx), r.nan(c), r.nan(c), r.nan(c)
			r.be.BatchNormTrain(n, c, hw, 1e-3, x, gamma, beta, y, mean, invstd, vu)
			dx, dg, db := r.randn(nx), r.randn(c), r.randn(c)
			r.be.BatchNormBackward(n, c, hw, x, r.randn(nx), mean, invstd, gamma, dx, dg, db)
			return []backend.Buffer{y, mean, invstd, vu, dx, dg, db}
		})
		add(fmt.Sprintf("large batch-norm with SiLU, %d per channel", n*hw), func(r *backendRun) []backend.Buffer {
			x := r.rand(nx, -1, 3, false)
			gamma, beta := r.rand(c, 0.5, 1.5, false), r.randn(c)
			y, mean, invstd := r.nan(nx), r.nan(c), r.nan(c)
			rm, rv := r.randn(c), r.rand(c, 0.5, 2, false)
			dy, dx, dg, db := r.randn(nx), r.nan(nx), r.randn(c), r.randn(c)
			p := backend.BN{N: n, C: c, HW: hw, Eps: 1e-3, Momentum: 0.03, Act: backend.BNSiLU}
			r.bnAct(backend.BNSiLU, true, func(fused backend.BatchNormActivator) {
				affine := r.nan(2 * c)
				fused.BatchNormTrainAct(p, x, gamma, beta, y, mean, invstd, affine, rm, rv)
				fused.BatchNormBackwardAct(p, x, dy, mean, invstd, gamma, affine, dx, dg, db, true)
			}, func(z, dz backend.Buffer) {
				vu := r.be.Alloc(c)
				r.be.BatchNormTrain(n, c, hw, 1e-3, x, gamma, beta, z, mean, invstd, vu)
				r.be.Axpby(p.Momentum, mean, 1-p.Momentum, rm)
				r.be.Axpby(p.Momentum, vu, 1-p.Momentum, rv)
				r.silu(backend.BNSiLU, z, y, dy, dz)
				r.be.BatchNormBackward(n, c, hw, x, dz, mean, invstd, gamma, dx, dg, db)
			}, nx, y, dy, dx)
			return []backend.Buffer{y, mean, invstd, rm, rv, dx, dg, db}
		})
	}
	return cs
}

// TestGPUGeometryOnHarness runs every backend case, and the large ones,
// on the CPU harness at an H200's launch geometry: grids of up to 1,056
// blocks of 256 threads and the GPU's batch-norm tile (4,096 elements),
// not the harness's small defaults, so that a kernel whose indexing or
// shared-memory use only breaks at full blocks or full grids fails here.
func TestGPUGeometryOnHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("large tensors at the GPU's geometry: not in -short")
	}
	be, _, err := newHarness(HarnessOptions{MaxBlocks: h200Blocks, Threads: blockSize})
	skipWithoutHarness(t, err)
	defer be.Close()
	be.k.bnTile = 0 // bnTileLen, the GPU's
	if b := be.k.grid1(1 << 30).x; b != h200Blocks || be.k.block().x != blockSize {
		t.Fatalf("geometry %d blocks × %d threads, want %d × %d", b, be.k.block().x, h200Blocks, blockSize)
	}
	compareCases(t, be, append(backendCases(), largeCases()...), 1e-5, true)
}

func compareCases(t *testing.T, be backend.Backend, cases []backendCase, rtol float64, logWorst bool) {
	ref := cpu.New()
	worstOf := map[string]float64{}
	var names []string
	for i, c := range cases {
		want := c.run(&backendRun{be: ref, rng: rand.New(rand.NewPCG(uint64(i), 5))})
		got := c.run(&backendRun{be: be, rng: rand.New(rand.NewPCG(uint64(i), 5))})
		for k := range want {
			w, g := make([]float32, want[k].Len), make([]float32, got[k].Len)
			ref.Download(w, want[k])
			be.Download(g, got[k])
			if c.exact {
				for j := range w {
					if math.Float32bits(w[j]) != math.Float32bits(g[j]) {
						t.Errorf("%s (case %d) output %d: element %d = %v, want %v exactly", c.name, i, k, j, g[j], w[j])
						break
					}
				}
				continue
			}
			e, at := tensor.Worst(g, w, rtol, rtol/10)
			if e > 1 {
				t.Errorf("%s (case %d) output %d: element %d = %v, want %v", c.name, i, k, at, g[at], w[at])
			}
			if _, ok := worstOf[c.name]; !ok {
				names = append(names, c.name)
			}
			worstOf[c.name] = max(worstOf[c.name], e*rtol)
		}
	}
	if logWorst {
		for _, n := range names {
			t.Logf("%s: worst error %.3g (relative, floor %.3g)", n, worstOf[n], rtol/10)
		}
	}
}

// The memory half: whole buffers go back to the pool, views are ignored,
// crossings are counted in calls and bytes, Host is nil, Sync is counted,
// and a buffer of another backend is refused.
func TestBackendMemoryOnHarness(t *testing.T) {
	be, e := newHarnessBackend(t)
	b := be.Alloc(10)
	be.Upload(b, make([]float32, 10))
	be.UploadBytes(b.Slice(2, 4), []byte{1, 2, 3, 4, 5})
	got := make([]float32, 3)
	be.Download(got, b.Slice(1, 4))
	be.Sync()
	if be.Host(b) != nil {
		t.Error("Host of device memory is not nil")
	}
	tr := be.Transfers()
	want := backend.Transfers{Uploads: 2, Downloads: 1, UploadBytes: 45, DownloadBytes: 12, Syncs: 1}
	if tr != want {
		t.Errorf("transfers %+v, want %+v", tr, want)
	}
	be.Free(b.Slice(0, 5)) // a view: ignored
	if len(e.live) != 1 {
		t.Errorf("%d live buffers after freeing a view, want 1", len(e.live))
	}
	be.Free(b)
	if len(e.live) != 0 {
		t.Errorf("%d live buffers after Free, want 0", len(e.live))
	}
	defer func() {
		if recover() == nil {
			t.Error("a CPU buffer was accepted by the cuda backend")
		}
	}()
	be.Fill(cpu.New().Alloc(3), 1)
}

// walkAxes merges what composes and moves the axes the destination stands
// still on (the summed ones) behind the parallel ones.
func TestWalkAxes(t *testing.T) {
	for _, c := range []struct {
		s               backend.Strided
		shape, src, dst []int
		outer           int
	}{
		{backend.Strided{Shape: []int{2, 3, 4}, Src: []int{12, 4, 1}, Dst: []int{12, 4, 1}}, []int{24}, []int{1}, []int{1}, 1},
		{backend.Strided{Shape: []int{2, 5, 3}, Src: []int{15, 3, 1}, Dst: []int{3, 0, 1}}, []int{2, 3, 5}, []int{15, 1, 3}, []int{3, 1, 0}, 2},
		{backend.Strided{Shape: []int{4, 1, 6}, Src: []int{0, 9, 0}, Dst: []int{6, 9, 1}}, []int{24}, []int{0}, []int{1}, 1},
		{backend.Strided{Shape: []int{30}, Src: []int{1}, Dst: []int{0}}, []int{30}, []int{1}, []int{0}, 0},
	} {
		shape, src, dst, outer, err := walkAxes(c.s)
		if err != nil || !slices.Equal(shape, c.shape) || !slices.Equal(src, c.src) || !slices.Equal(dst, c.dst) || outer != c.outer {
			t.Errorf("walkAxes(%+v) = %v %v %v %d, %v; want %v %v %v %d", c.s, shape, src, dst, outer, err, c.shape, c.src, c.dst, c.outer)
		}
	}
	if _, _, _, _, err := walkAxes(backend.Strided{Shape: []int{2}, Src: []int{1}}); err == nil {
		t.Error("a walk without destination strides was accepted")
	}
}

// A buffer dropped without Free — what an inference pass's activations
// and an uploaded input are — gives its device memory back once it is
// unreachable, exactly once, and an explicit Free is not repeated by the
// cleanup.
func TestDroppedBuffersAreReturned(t *testing.T) {
	be, e := newHarnessBackend(t)
	live := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.live)
	}
	kept := be.Alloc(8)
	freed := be.Alloc(8)
	be.Free(freed)
	gc := debug.SetGCPercent(-1) // no collection before the count
	for range 50 {
		b := be.Alloc(1 << 10)
		be.Fill(b.Slice(0, 4), 1) // views share the handle
	}
	n := live()
	debug.SetGCPercent(gc)
	if n != 51 {
		t.Fatalf("%d live buffers after the allocations, want 51", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for live() > 1 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := live(); n != 1 {
		t.Fatalf("%d live buffers after the dropped ones became unreachable, want 1 (the kept one)", n)
	}
	if h := be.held.Load(); h != 32 {
		t.Errorf("held %d bytes, want the kept buffer's 32", h)
	}
	if be.lostFrees.Load() != 0 {
		t.Errorf("%d cleanups failed to free", be.lostFrees.Load())
	}
	be.Free(kept)
	if n := live(); n != 0 {
		t.Errorf("%d live buffers after Free of the last, want 0", n)
	}
	runtime.GC() // kept's cleanup must not free it a second time (the engine would fail)
	time.Sleep(20 * time.Millisecond)
	be.Fill(be.Alloc(2), 0)
	be.Sync()
	if be.lostFrees.Load() != 0 {
		t.Errorf("a cleanup freed an explicitly freed buffer again")
	}
}
