package tensor

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// conformanceBackend is a backend the conformance suite runs for and how
// close to the CPU reference it must come: rtol 0 is bit for bit (the CPU
// kernels behind another memory), otherwise the largest error relative
// to max(|reference|, 1) each output and gradient may have.
type conformanceBackend struct {
	name string
	open func() (backend.Backend, string) // the backend, or why it is skipped
	rtol float64
}

// onceBackend opens a backend once per test binary, or keeps why not.
type onceBackend struct {
	once sync.Once
	be   backend.Backend
	skip string
}

func (o *onceBackend) open(name string, f func() (*cuda.Backend, error)) (backend.Backend, string) {
	o.once.Do(func() {
		be, err := f()
		if err != nil {
			o.skip = name + ": " + err.Error()
			return
		}
		o.be = be
	})
	return o.be, o.skip
}

var cudaOnce, harnessOnce onceBackend

// openCUDA opens GPU 0 with TF32 off, or says why not (no driver, library
// or device on this host).
func openCUDA() (backend.Backend, string) {
	return cudaOnce.open("cuda", func() (*cuda.Backend, error) { return cuda.NewBackend(0, cuda.Options{}) })
}

// openHarness starts the CUDA backend on the CPU harness (its kernels
// under g++), or says why it cannot be built here.
func openHarness() (backend.Backend, string) {
	return harnessOnce.open("cuda harness", func() (*cuda.Backend, error) { return cuda.NewHarnessBackend(cuda.HarnessOptions{}) })
}

// conformanceBackends are the backends the conformance suite runs for;
// the CPU one is the reference. cuda-harness is the CUDA backend's Go code
// and kernels on the CPU harness, where its fused forms (batch-norm with
// its activation, gradients written by their first writer) meet the tape;
// cuda runs only where a GPU is present (scripts/gpu-check.sh runs this
// test there) and is held to 1e-3 with TF32 off.
func conformanceBackends() []conformanceBackend {
	return []conformanceBackend{
		{"cpu", func() (backend.Backend, string) { return cpu.New(), "" }, 0},
		{"emu", func() (backend.Backend, string) { return cpu.NewEmulated(), "" }, 0},
		{"cuda-harness", openHarness, 1e-4},
		{"cuda", openCUDA, 1e-3},
	}
}

// hostOnlyCase names the gradient cases built on test-helper ops that run
// as host code (they are not on any backend, so not part of the suite).
func hostOnlyCase(name string) bool {
	return slices.Contains([]string{"addscalar", "clamp", "bce-with-logits", "index-select repeats"}, name)
}

// runCase runs one case's forward and backward on be with fixed inputs and
// output gradients, returning the outputs and the input gradients as host
// copies.
func runCase(be backend.Backend, c gradCase, seed uint64) (outs, grads [][]float32) {
	rng := rand.New(rand.NewPCG(seed, 11))
	in := onBackend(be, c.inputs(rng))
	tp := NewTape(be)
	ys := c.f(tp, in)
	seeds := make([]*Tensor, len(ys))
	for k, y := range ys {
		r := make([]float32, y.Numel())
		for i := range r {
			r[i] = float32(rng.Float64()*2 - 1)
		}
		seeds[k] = Upload(be, r, y.Shape...)
		outs = append(outs, y.ToHost(nil))
	}
	if err := tp.BackwardFrom(ys, seeds); err != nil {
		panic(err)
	}
	for _, x := range in {
		if x != nil && x.RequiresGrad {
			grads = append(grads, x.GradToHost(nil))
		}
	}
	return outs, grads
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// worstRel returns the largest |got−want|/max(|want|, 1) over all values
// (+Inf for a length mismatch or a NaN where the reference has none).
func worstRel(got, want [][]float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	w := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return math.Inf(1)
		}
		for j, r := range want[i] {
			g := got[i][j]
			if g == r || math.IsNaN(float64(g)) && math.IsNaN(float64(r)) {
				continue
			}
			e := math.Abs(float64(g-r)) / max(math.Abs(float64(r)), 1)
			if math.IsNaN(e) {
				e = math.Inf(1)
			}
			w = max(w, e)
		}
	}
	return w
}

// Every op of the suite, forward and backward, gives the same bits on each
// host-kernel backend as on the CPU reference (a device backend comes
// within its tolerance, and the worst case of each op is logged), and
// passes the gradient checker there.
func TestConformance(t *testing.T) {
	ref := cpu.New()
	for _, cb := range conformanceBackends() {
		t.Run(cb.name, func(t *testing.T) {
			be, skip := cb.open()
			if skip != "" {
				t.Skip(skip)
			}
			for _, c := range gradCases() {
				if hostOnlyCase(c.name) {
					continue
				}
				wantO, wantG := runCase(ref, c, 3)
				gotO, gotG := runCase(be, c, 3)
				if cb.rtol == 0 {
					if !sameBits(gotO, wantO) || !sameBits(gotG, wantG) {
						t.Errorf("%s on %s differs from the CPU reference", c.name, be.Name())
					}
				} else {
					wo, wg := worstRel(gotO, wantO), worstRel(gotG, wantG)
					t.Logf("%s: worst relative error %.3g (outputs), %.3g (gradients)", c.name, wo, wg)
					if wo > cb.rtol || wg > cb.rtol {
						t.Errorf("%s on %s: worst relative error %.3g (outputs), %.3g (gradients), want ≤ %g", c.name, be.Name(), wo, wg, cb.rtol)
					}
				}
				if err := checkGradOn(be, c, 1); err != nil {
					t.Errorf("%s on %s: %v", c.name, be.Name(), err)
				}
			}
		})
	}
}

// Host code cannot touch the emulated device's memory: a Host view panics
// with a message that names the fix, and only explicit copies cross.
func TestEmulatedMemoryIsNotHostAddressable(t *testing.T) {
	be := cpu.NewEmulated()
	x := Upload(be, []float32{1, 2, 3}, 3)
	func() {
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), "ToHost") {
				t.Errorf("Host on emu memory: recovered %v, want a panic naming ToHost", r)
			}
		}()
		_ = x.Host()
	}()
	if got := x.ToHost(nil); !slices.Equal(got, []float32{1, 2, 3}) {
		t.Errorf("ToHost = %v", got)
	}
	tr := be.Transfers()
	if tr.Uploads != 1 || tr.Downloads != 1 || tr.UploadBytes != 12 || tr.DownloadBytes != 12 {
		t.Errorf("transfers %+v, want one 12-byte crossing each way", tr)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a CPU tensor was accepted by an op on the emulated device")
			}
		}()
		NewTape(be).Add(x, New(hostBackend, []float32{1, 1, 1}, 3))
	}()
}
