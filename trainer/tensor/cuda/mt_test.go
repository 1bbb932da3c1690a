package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// mtSizes covers empty tensors, chunk edges and several chunks.
var mtSizes = []int{0, 1, 7, 300, mtChunk - 1, mtChunk, mtChunk + 1, 3*mtChunk + 5}

// twinLists uploads the same random values into two lists of buffers.
func twinLists(be *Backend, seed uint64, lo, hi float32) (a, b []backend.Buffer) {
	r := rnd(seed)
	for _, n := range mtSizes {
		x := uniform(r, n, lo, hi)
		ba, bb := be.Alloc(max(n, 1)).Slice(0, n), be.Alloc(max(n, 1)).Slice(0, n)
		be.Upload(ba, x)
		be.Upload(bb, x)
		a, b = append(a, ba), append(b, bb)
	}
	return a, b
}

// sameBits fails unless every buffer of got holds want's bits.
func sameBits(t *testing.T, be *Backend, what string, got, want []backend.Buffer) {
	t.Helper()
	for i := range want {
		g, w := make([]float32, got[i].Len), make([]float32, want[i].Len)
		be.Download(g, got[i])
		be.Download(w, want[i])
		for j := range w {
			if math.Float32bits(g[j]) != math.Float32bits(w[j]) {
				t.Fatalf("%s: tensor %d (%d elements) element %d: list form %v, single-tensor kernel %v", what, i, len(w), j, g[j], w[j])
			}
		}
	}
}

// TestMultiTensorMatchesSingle runs each list-form step on the CPU harness
// against its single-tensor kernel, launched per tensor on a copy: same
// bits, element for element, across chunk edges and empty tensors; the
// tables are uploaded once per distinct list and never counted as
// transfers.
func TestMultiTensorMatchesSingle(t *testing.T) {
	be, _ := newHarnessBackend(t)
	k := be.k
	p, pSingle := twinLists(be, 1, -1, 1)
	g, _ := twinLists(be, 2, -0.1, 0.1)
	buf, bufSingle := twinLists(be, 3, 0, 0)
	m, mSingle := twinLists(be, 4, 0, 0)
	v, vSingle := twinLists(be, 5, 0, 0)
	first := make([]bool, len(p))

	t0 := be.Transfers()
	for step := 0; step < 2; step++ {
		for i := range first {
			first[i] = step == 0
		}
		be.SGDNesterovSteps(p, g, buf, first, 0.01, 0.937, 5e-4, 0.5)
		for i := range pSingle {
			must(k.SGDNesterov(be.ptr(pSingle[i]), be.ptr(g[i]), be.ptr(bufSingle[i]), pSingle[i].Len, 0.01, 0.5, 0.937, 5e-4, step == 0))
		}
	}
	sameBits(t, be, "sgd parameters", p, pSingle)
	sameBits(t, be, "sgd momentum", buf, bufSingle)

	for step := 1; step <= 3; step++ {
		be.AdamWSteps(p, g, m, v, 1e-3, 0.05, 0.9, 0.999, 1e-8, step)
		for i := range pSingle {
			must(k.AdamW(be.ptr(pSingle[i]), be.ptr(g[i]), be.ptr(mSingle[i]), be.ptr(vSingle[i]), pSingle[i].Len, 1e-3, 0.05, 0.9, 0.999, 1e-8, step))
		}
	}
	sameBits(t, be, "adamw parameters", p, pSingle)
	sameBits(t, be, "adamw moments", append(m, v...), append(mSingle, vSingle...))

	// Muon's momentum over a group of same-shaped matrices, one of them
	// longer than a chunk (step 0: the momentum alone, as trainer/optim
	// runs a zero step).
	for _, sh := range [][2]int{{5, 7}, {129, 130}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		var mp, mg, mm, mmSingle []backend.Buffer
		r := rnd(uint64(n))
		for range 3 {
			pb, gb := be.Alloc(n), be.Alloc(n)
			be.Upload(gb, uniform(r, n, -0.1, 0.1))
			m0 := uniform(r, n, -0.05, 0.05)
			ma, mb := be.Alloc(n), be.Alloc(n)
			be.Upload(ma, m0)
			be.Upload(mb, m0)
			mp, mg, mm, mmSingle = append(mp, pb), append(mg, gb), append(mm, ma), append(mmSingle, mb)
		}
		be.MuonSteps(mp, mg, mm, rows, cols, 0.95, 0)
		u := be.Alloc(n)
		for i := range mmSingle {
			must(k.MuonMomentum(be.ptr(mg[i]), be.ptr(mmSingle[i]), be.ptr(u), n, 0.95))
		}
		sameBits(t, be, fmt.Sprintf("muon momentum %dx%d", rows, cols), mm, mmSingle)
	}

	be.EMAUpdate(buf, p, 0.3)
	for i := range bufSingle {
		must(k.EMA(be.ptr(bufSingle[i]), be.ptr(pSingle[i]), 0.3, bufSingle[i].Len))
	}
	sameBits(t, be, "ema", buf, bufSingle)

	// Clipping: the norm against a double-precision host sum, the scaled
	// gradients against scale_by with the same coefficient.
	for _, maxNorm := range []float64{1e9, 1} {
		gc, gcSingle := twinLists(be, 6, -0.1, 0.1)
		sum := 0.0
		for _, x := range gc {
			h := make([]float32, x.Len)
			be.Download(h, x)
			for _, y := range h {
				sum += float64(y) * float64(y)
			}
		}
		norm := be.Alloc(2)
		be.ClipGrads(gc, maxNorm, norm.Slice(0, 1))
		coef := norm.Slice(1, 2)
		must(k.Gather([]int{1}, []int{1}, be.ptr(norm), be.ptr(coef)))
		must(k.ClipCoef(be.ptr(coef), float32(maxNorm)))
		for _, x := range gcSingle {
			must(k.ScaleBy(be.ptr(x), be.ptr(coef), x.Len))
		}
		sameBits(t, be, "clipped gradients", gc, gcSingle)
		var got [1]float32
		be.Download(got[:], norm.Slice(0, 1))
		if want := float32(math.Sqrt(sum)); math.Abs(float64(got[0]-want)) > 1e-7*float64(want) {
			t.Errorf("global norm %v, host %v", got[0], want)
		}
	}

	be.ZeroGrads(g)
	for i, x := range g {
		h := make([]float32, x.Len)
		be.Download(h, x)
		for j, y := range h {
			if y != 0 {
				t.Fatalf("ZeroGrads left tensor %d element %d = %v", i, j, y)
			}
		}
	}

	// Every list above crossed only through the test's own uploads and
	// downloads; repeating a list reuses its table.
	t1 := be.Transfers()
	tb := be.TableBytes()
	be.EMAUpdate(buf, p, 0.3)
	be.ZeroGrads(g)
	if be.Transfers() != t1 || be.TableBytes() != tb {
		t.Errorf("repeated lists crossed or uploaded tables again: transfers %+v → %+v, table bytes %d → %d", t1, be.Transfers(), tb, be.TableBytes())
	}
	t.Logf("tables: %d bytes uploaded; transfers before %+v", tb, t0)
}

// TestOptimLaunchesOnHarness counts the kernel launches of one clip, step,
// gradient zeroing and EMA update of each optimiser over the n model's
// parameters on the CPU harness, in an iteration after the first: with list-form kernels they grow with the
// groups (and MuSGD's matrices, whose Newton–Schulz products are per
// parameter), not with the parameter count.
func TestOptimLaunchesOnHarness(t *testing.T) {
	be, e := newHarnessBackend(t)
	shapes := optimShapes(t)
	for _, oc := range optimCases {
		r := newOptimRun(be, shapes)
		groups, err := optim.BuildGroups(r.params, optim.GroupConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 5e-4, Muon: oc.muon})
		if err != nil {
			t.Fatal(err)
		}
		o := oc.new(groups)
		var avg, state []backend.Buffer
		for _, p := range r.params {
			avg, state = append(avg, be.Alloc(p.Value.Len)), append(state, p.Value)
		}
		ema, err := optim.NewEMAOn(be, optimKernels(be), avg, state)
		if err != nil {
			t.Fatal(err)
		}
		// The first iteration also allocates and zeroes the optimiser's
		// state; the second is every later one.
		var n int
		for range 2 {
			r.grads(1)
			l0 := e.launchCount()
			optim.ClipGrads(r.params, 10)
			o.Step()
			optim.ZeroGrad(r.params)
			if err := ema.UpdateOn(state); err != nil {
				t.Fatal(err)
			}
			n = e.launchCount() - l0
		}
		t.Logf("%s: %d parameters in %d groups: %d launches for clip + step + zero + EMA", oc.name, len(shapes), len(groups), n)
		if !oc.muon && n > 8+len(groups) {
			t.Errorf("%s: %d launches, want at most %d (list-form kernels)", oc.name, n, 8+len(groups))
		}
	}
}
