package tensor

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// conformanceBackends are the backends the conformance suite runs for;
// the CPU one is the reference the others must equal bit for bit.
func conformanceBackends() []backend.Backend {
	return []backend.Backend{cpu.New(), cpu.NewEmulated()}
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

// Every op of the suite, forward and backward, gives the same bits on each
// backend as on the CPU reference, and passes the gradient checker there.
func TestConformance(t *testing.T) {
	ref := cpu.New()
	for _, be := range conformanceBackends() {
		t.Run(be.Name(), func(t *testing.T) {
			for _, c := range gradCases() {
				if hostOnlyCase(c.name) {
					continue
				}
				wantO, wantG := runCase(ref, c, 3)
				gotO, gotG := runCase(be, c, 3)
				if !sameBits(gotO, wantO) || !sameBits(gotG, wantG) {
					t.Errorf("%s on %s differs from the CPU reference", c.name, be.Name())
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
		NewTape(be).Add(x, New([]float32{1, 1, 1}, 3))
	}()
}
