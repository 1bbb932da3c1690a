package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// The Backend runs trainer/optim's kernels on the device.
var _ optim.DeviceKernels = (*Backend)(nil)

// optimShape is one parameter of the n model: its name and shape.
type optimShape struct {
	name  string
	shape []int
	norm  bool
}

// optimShapes is a representative subset of the n model's parameters,
// with their real names and shapes: every eighth vector (biases, batch-norm
// weights: each launch is a round trip over the harness's pipes) and the
// matrices Newton–Schulz handles in seconds on the CPU harness — wide
// ones, tall ones (rows > cols) and convolution kernels.
func optimShapes(t *testing.T) []optimShape {
	t.Helper()
	m, err := model.New(model.Config{Variant: "n", Classes: 80, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	norm := map[string]bool{}
	for _, nb := range m.BatchNorms() {
		norm[nb.Prefix+".weight"] = true
	}
	var out []optimShape
	wide, tall, vectors := 0, 0, 0
	for _, p := range m.Params() {
		s := optimShape{p.Name, append([]int(nil), p.Shape...), norm[p.Name]}
		if len(s.shape) < 2 {
			if vectors%8 == 0 {
				out = append(out, s)
			}
			vectors++
			continue
		}
		rows := s.shape[0]
		cols := 1
		for _, d := range s.shape[1:] {
			cols *= d
		}
		if rows*cols > 20000 || min(rows, cols) > 64 {
			continue
		}
		if rows > cols && tall < 3 {
			tall++
			out = append(out, s)
		} else if rows <= cols && wide < 5 {
			wide++
			out = append(out, s)
		}
	}
	if tall == 0 || wide == 0 {
		t.Fatalf("the n model has %d tall and %d wide small matrices; the subset needs both", tall, wide)
	}
	return out
}

// optimRun is one optimiser setup on a backend: parameters with values
// and gradients drawn from one seed, so every backend sees the same ones.
type optimRun struct {
	be     backend.Backend
	params []*optim.Param
	rng    *rand.Rand
}

func newOptimRun(be backend.Backend, shapes []optimShape) *optimRun {
	r := &optimRun{be: be, rng: rand.New(rand.NewPCG(3, 4))}
	for _, s := range shapes {
		n := 1
		for _, d := range s.shape {
			n *= d
		}
		p := &optim.Param{Name: s.name, Shape: s.shape, Backend: be, Kernels: optimKernels(be), Value: be.Alloc(n), Gradient: be.Alloc(n), Norm: s.norm}
		be.Upload(p.Value, r.normal(n, 1))
		r.params = append(r.params, p)
	}
	return r
}

func (r *optimRun) normal(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.rng.NormFloat64() * scale)
	}
	return x
}

// grads uploads fresh gradients (one crossing per parameter: the test's,
// not the step's).
func (r *optimRun) grads(scale float64) {
	for _, p := range r.params {
		r.be.Upload(p.Gradient, r.normal(p.Gradient.Len, scale))
	}
}

func (r *optimRun) host(b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	r.be.Download(v, b)
	return v
}

// noCrossing runs f and fails when it moved anything across the host
// boundary.
func noCrossing(t *testing.T, be backend.Backend, what string, f func()) {
	t.Helper()
	t0 := be.Transfers()
	f()
	if t1 := be.Transfers(); t1 != t0 {
		t.Errorf("%s crossed on %s: %+v before, %+v after", what, be.Name(), t0, t1)
	}
}

// optimTol is the relative tolerance of the optimiser comparisons, with
// an absolute floor of optimTol/10 of the tensor's largest magnitude.
const optimTol = 1e-3

// worstOf collects each kernel's worst error, relative to the tensor's
// largest magnitude.
type worstOf struct {
	t     *testing.T
	names []string
	e     map[string]float64
	at    map[string]string
}

func newWorstOf(t *testing.T) *worstOf {
	return &worstOf{t: t, e: map[string]float64{}, at: map[string]string{}}
}

// check compares got with want, element by element within optimTol of
// max(|want[i]|, largest |want|/10).
func (w *worstOf) check(kernel, what string, got, want []float32) {
	t := w.t
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %s: %d values, cpu %d", kernel, what, len(got), len(want))
	}
	big := 0.0
	for _, v := range want {
		big = max(big, math.Abs(float64(v)))
	}
	e, at := tensor.Worst(got, want, optimTol, max(big, 1e-30)*optimTol/10)
	if e > 1 {
		t.Errorf("%s %s: element %d = %v, cpu %v", kernel, what, at, got[at], want[at])
	}
	prev, seen := w.e[kernel]
	if !seen {
		w.names = append(w.names, kernel)
	}
	if !seen || e*optimTol > prev {
		w.e[kernel], w.at[kernel] = e*optimTol, what
	}
}

func (w *worstOf) log() {
	for _, n := range w.names {
		w.t.Logf("%s: worst relative error %.3g (floor 1/10 of the tensor's largest magnitude; %s)", n, w.e[n], w.at[n])
	}
}

// optimCases are the optimisers the comparison steps.
// MuSGD's first step has lr 0, as the first warmup iteration does: only
// its buffers move and Newton–Schulz is skipped; the second runs it.
var optimCases = []struct {
	name     string
	muon     bool
	firstLR0 bool
	new      func([]*optim.Group) optim.Optimizer
}{
	{"SGD", false, false, func(g []*optim.Group) optim.Optimizer { return optim.NewSGD(g) }},
	{"AdamW", false, false, func(g []*optim.Group) optim.Optimizer { return optim.NewAdamW(g, 0.9) }},
	{"MuSGD", true, true, func(g []*optim.Group) optim.Optimizer { return optim.NewMuSGD(g, 0.5, 0.5) }},
}

// compareOptim runs on be and on the CPU backend, from the same values
// and gradients: two steps of each optimiser (the first fills the momentum
// buffers, the second reads them), clipping with the norm above and below
// the limit, GlobalNorm, ScaleGrads, ZeroGrad and two EMA updates.
// Parameters, the step's update, optimiser state, gradients, norms and
// averages must agree within optimTol; the steps, clipping, scaling,
// zeroing and EMA must not cross on be (ClipGradNorm and GlobalNorm cross
// once each, the norm they return).
func compareOptim(t *testing.T, be backend.Backend) {
	shapes := optimShapes(t)
	t.Logf("%d parameters of the n model", len(shapes))
	w := newWorstOf(t)
	for _, oc := range optimCases {
		type result struct {
			before, after [][]float32
			state         map[string][]float32
		}
		run := func(be backend.Backend) result {
			r := newOptimRun(be, shapes)
			groups, err := optim.BuildGroups(r.params, optim.GroupConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 5e-4, Muon: oc.muon})
			if err != nil {
				t.Fatal(err)
			}
			o := oc.new(groups)
			var res result
			for step := range 2 {
				r.grads(1)
				for _, g := range groups {
					g.LR = 0.05
					if step == 0 && oc.firstLR0 {
						g.LR = 0
					}
				}
				if step == 1 {
					for _, p := range r.params {
						res.before = append(res.before, r.host(p.Value))
					}
				}
				noCrossing(t, be, oc.name+" step", o.Step)
			}
			for _, p := range r.params {
				res.after = append(res.after, r.host(p.Value))
			}
			res.state = o.State()
			return res
		}
		want, got := run(cpu.New()), run(be)
		for i, s := range shapes {
			w.check(oc.name, s.name, got.after[i], want.after[i])
			du, dw := make([]float32, len(want.after[i])), make([]float32, len(want.after[i]))
			for j := range du {
				du[j] = got.after[i][j] - got.before[i][j]
				dw[j] = want.after[i][j] - want.before[i][j]
			}
			w.check(oc.name+" update", s.name, du, dw)
		}
		if len(got.state) != len(want.state) {
			t.Fatalf("%s: %d state buffers, cpu %d", oc.name, len(got.state), len(want.state))
		}
		for k, v := range want.state {
			w.check(oc.name+" state", k, got.state[k], v)
		}
	}

	// Clipping: gradients of norm ≈ 0.3·√n·scale, far above and below 10.
	for _, scale := range []float64{3, 1e-3} {
		name := fmt.Sprintf("clip (gradient scale %g)", scale)
		run := func(be backend.Backend) ([][]float32, float64) {
			r := newOptimRun(be, shapes)
			var gh [][]float32
			for _, p := range r.params {
				gh = append(gh, r.normal(p.Gradient.Len, scale))
				be.Upload(p.Gradient, gh[len(gh)-1])
			}
			noCrossing(t, be, "ClipGrads", func() { optim.ClipGrads(r.params, 10) })
			var clipped [][]float32
			for i, p := range r.params {
				clipped = append(clipped, r.host(p.Gradient))
				be.Upload(p.Gradient, gh[i])
			}
			t0 := be.Transfers()
			norm := optim.ClipGradNorm(r.params, 10)
			if d, u := be.Transfers().Downloads-t0.Downloads, be.Transfers().Uploads-t0.Uploads; d > 1 || u != 0 {
				t.Errorf("ClipGradNorm made %d downloads and %d uploads, want at most 1 download (the norm)", d, u)
			}
			for i, p := range r.params {
				sameBits := r.host(p.Gradient)
				for j := range sameBits {
					if math.Float32bits(sameBits[j]) != math.Float32bits(clipped[i][j]) {
						t.Fatalf("%s: ClipGradNorm and ClipGrads differ at %d: %v, %v", p.Name, j, sameBits[j], clipped[i][j])
					}
				}
			}
			// GlobalNorm reads the clipped norm (one download); ScaleGrads
			// halves the gradients on the device.
			t0 = be.Transfers()
			clippedNorm := optim.GlobalNorm(r.params)
			if d, u := be.Transfers().Downloads-t0.Downloads, be.Transfers().Uploads-t0.Uploads; d > 1 || u != 0 {
				t.Errorf("GlobalNorm made %d downloads and %d uploads, want at most 1 download (the norm)", d, u)
			}
			noCrossing(t, be, "ScaleGrads", func() { optim.ScaleGrads(r.params, 0.5) })
			for _, p := range r.params {
				clipped = append(clipped, r.host(p.Gradient))
			}
			clipped = append(clipped, []float32{float32(clippedNorm)})
			noCrossing(t, be, "ZeroGrad", func() { optim.ZeroGrad(r.params) })
			for _, p := range r.params {
				for _, v := range r.host(p.Gradient) {
					if v != 0 {
						t.Fatalf("%s: ZeroGrad left %v", p.Name, v)
					}
				}
			}
			return clipped, norm
		}
		want, wn := run(cpu.New())
		got, gn := run(be)
		if (wn > 10) != (scale > 1) {
			t.Fatalf("%s: norm %g is on the wrong side of the limit", name, wn)
		}
		if e := math.Abs(gn-wn) / wn; e > optimTol {
			t.Errorf("%s: norm %.7g, cpu %.7g", name, gn, wn)
		} else {
			w.check(name+" norm", "norm", []float32{float32(gn)}, []float32{float32(wn)})
		}
		for i, s := range shapes {
			w.check(name, s.name, got[i], want[i])
			w.check("scale grads", s.name, got[len(shapes)+i], want[len(shapes)+i])
		}
		w.check("global norm", "norm after clipping", got[2*len(shapes)], want[2*len(shapes)])
	}

	// The EMA of the parameters, twice (Tau small, so d moves).
	run := func(be backend.Backend) [][]float32 {
		r := newOptimRun(be, shapes)
		var avg, state []backend.Buffer
		for _, p := range r.params {
			avg, state = append(avg, be.Alloc(p.Value.Len)), append(state, p.Value)
		}
		ema, err := optim.NewEMAOn(be, optimKernels(be), avg, state)
		if err != nil {
			t.Fatal(err)
		}
		ema.Tau = 2
		for range 2 {
			for _, p := range r.params {
				be.Upload(p.Value, r.normal(p.Value.Len, 1))
			}
			noCrossing(t, be, "EMA update", func() {
				if err := ema.UpdateOn(state); err != nil {
					t.Fatal(err)
				}
			})
		}
		return ema.Values()
	}
	want, got := run(cpu.New()), run(be)
	for i, s := range shapes {
		w.check("ema", s.name, got[i], want[i])
	}
	w.log()
}

// TestOptimOnHarness runs trainer/optim's steps, clipping and EMA through
// the Backend's device twins on the CPU harness (not a GPU) against the
// CPU backend.
func TestOptimOnHarness(t *testing.T) {
	be, _ := newHarnessBackend(t)
	compareOptim(t, be)
}

// TestOptimOnGPU is the same comparison on GPU 0 (cuBLAS for
// Newton–Schulz's products, TF32 off).
func TestOptimOnGPU(t *testing.T) {
	compareOptim(t, openGPUBackend(t))
}

// TestOptimCrossingsOnHarness counts what one step of each optimiser and
// one clip move across the host boundary on the harness Backend through
// its device twins: nothing.
func TestOptimCrossingsOnHarness(t *testing.T) {
	be, _ := newHarnessBackend(t)
	shapes := optimShapes(t)
	count := func(f func()) backend.Transfers {
		t0 := be.Transfers()
		f()
		t1 := be.Transfers()
		return backend.Transfers{Uploads: t1.Uploads - t0.Uploads, Downloads: t1.Downloads - t0.Downloads,
			UploadBytes: t1.UploadBytes - t0.UploadBytes, DownloadBytes: t1.DownloadBytes - t0.DownloadBytes, Syncs: t1.Syncs - t0.Syncs}
	}
	for _, oc := range optimCases {
		r := newOptimRun(be, shapes)
		groups, err := optim.BuildGroups(r.params, optim.GroupConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 5e-4, Muon: oc.muon})
		if err != nil {
			t.Fatal(err)
		}
		o := oc.new(groups)
		r.grads(1)
		got := count(func() {
			optim.ClipGrads(r.params, 10)
			o.Step()
		})
		t.Logf("%s clip + step over %d parameters: device twins %+v", oc.name, len(shapes), got)
		if got != (backend.Transfers{}) {
			t.Errorf("%s: the device twins crossed: %+v", oc.name, got)
		}
	}
}

// optimKernels are the optimiser's kernels trainer/device chooses for be:
// the Backend's twins, or the CPU reference's Go code through RunHost.
func optimKernels(be backend.Backend) optim.Kernels {
	if b, ok := be.(*Backend); ok {
		return optim.TwinKernels(b)
	}
	return optim.HostKernels(be.(backend.HostKernels))
}
