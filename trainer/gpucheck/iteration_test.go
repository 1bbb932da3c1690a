package gpucheck

import (
	"flag"
	"math"
	"testing"

	"github.com/segpipe/segpipe/trainer/internal/modelcase"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudatest"
)

var iterationWeights = flag.String("iteration-weights", "",
	"checkpoint the training-iteration comparison starts from (default: the golden weights)")

// iterationModel returns the model the comparison starts from.
func iterationModel(t *testing.T) *model.Model {
	t.Helper()
	if *iterationWeights == "" {
		return modelcase.GoldenWeights(t)
	}
	m, _, err := model.OpenCheckpoint(*iterationWeights)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// iterationResult is what one training iteration produces: the logged
// loss items, every parameter gradient and the state after the step's
// batch-norm updates, by name.
type iterationResult struct {
	items [loss.NumComponents]float64
	grads map[string][]float32
	state map[string][]float32
	order []string
}

// trainIteration runs one training iteration as the trainer's step does
// (forward in training mode, the loss on the host, backward from its
// output gradients) on be, from iterationModel, on modelcase.SyntheticBatch(b, sz).
func trainIteration(t *testing.T, be backend.Backend, b, sz int) iterationResult {
	t.Helper()
	m := iterationModel(t)
	tp, outs, out, tg := modelcase.ModelLoss(t, be, m, b, sz)
	crit, err := loss.NewCriterion(loss.DefaultConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	g := out.Grads()
	res, err := crit.Forward(out, tg, g)
	if err != nil {
		t.Fatal(err)
	}
	seeds := make([]*tensor.Tensor, len(outs))
	for i, s := range [][]float32{g.One2Many.Boxes, g.One2Many.Scores, g.One2Many.Coef,
		g.One2One.Boxes, g.One2One.Scores, g.One2One.Coef, g.Proto, g.Semseg} {
		seeds[i] = tensor.Upload(be, s, outs[i].Shape...)
	}
	if err := tp.BackwardFrom(outs, seeds); err != nil {
		t.Fatal(err)
	}
	r := iterationResult{items: res.Items, grads: map[string][]float32{}, state: map[string][]float32{}}
	for _, p := range m.Params() {
		r.grads[p.Name] = p.Value.GradToHost(nil)
		r.order = append(r.order, p.Name)
	}
	for _, p := range m.State() {
		r.state[p.Name] = p.Value.ToHost(nil)
	}
	return r
}

// compareIterations checks got against the CPU's want: each loss item
// within rtol relative, each gradient and state tensor within rtol of its
// largest magnitude (see the floor below), and logs the worst cases.
func compareIterations(t *testing.T, got, want iterationResult, rtol float64) {
	t.Helper()
	for i := range want.items {
		w, g := want.items[i], got.items[i]
		e := math.Abs(g-w) / max(math.Abs(w), 1e-12)
		t.Logf("loss item %d: %.7g (cpu %.7g), relative error %.3g", i, g, w, e)
		if !(e <= rtol) {
			t.Errorf("loss item %d = %.7g, cpu %.7g: relative error %.3g > %g", i, g, w, e, rtol)
		}
	}
	// A tensor is measured against its own largest magnitude, but not
	// below 1e-4 of the largest over all tensors of its kind: gradients
	// that are zero by construction (the biases of batch-norms whose output
	// a later batch-norm re-normalises) hold rounding noise on both sides.
	check := func(kind string, names []string, got, want map[string][]float32) {
		worstAll, worstName := 0.0, ""
		floor := 0.0
		for _, name := range names {
			for _, v := range want[name] {
				floor = max(floor, 1e-4*math.Abs(float64(v)))
			}
		}
		for _, name := range names {
			w, g := want[name], got[name]
			if len(g) != len(w) {
				t.Errorf("%s %s: %d values, cpu %d", kind, name, len(g), len(w))
				continue
			}
			absmax := floor
			for _, v := range w {
				absmax = max(absmax, math.Abs(float64(v)))
			}
			worstT := 0.0
			for j := range w {
				e := math.Abs(float64(g[j]-w[j])) / max(absmax, 1e-12)
				if math.IsNaN(e) {
					e = math.Inf(1)
				}
				worstT = max(worstT, e)
			}
			if worstT > rtol {
				t.Errorf("%s %s: error %.3g of its largest magnitude %.3g > %g", kind, name, worstT, absmax, rtol)
			}
			if worstT >= worstAll {
				worstAll, worstName = worstT, name
			}
		}
		t.Logf("%s: %d tensors, worst error %.3g of the tensor's largest magnitude (%s)", kind, len(names), worstAll, worstName)
	}
	check("gradient", want.order, got.grads, want.grads)
	var names []string
	for n := range want.state {
		names = append(names, n)
	}
	check("state", names, got.state, want.state)
}

// TestIterationOnHarness runs one training iteration of the n model on
// the CPU harness (not a GPU) and on the CPU backend, at 64 px: every op
// of a real step through the Backend's Go code.
func TestIterationOnHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("a model step on the CPU harness takes tens of seconds")
	}
	be := cudatest.Harness(t)
	want := trainIteration(t, cpu.New(), 2, 64)
	got := trainIteration(t, be, 2, 64)
	compareIterations(t, got, want, 1e-3)
}

// TestIterationOnGPU is the same comparison on GPU 0 at the size the GPU
// check names: variant n, batch 2, 256 px, TF32 off, 1e-3.
func TestIterationOnGPU(t *testing.T) {
	be := cudatest.GPU(t)
	want := trainIteration(t, cpu.New(), 2, 256)
	got := trainIteration(t, be, 2, 256)
	compareIterations(t, got, want, 1e-3)
	tr := be.Transfers()
	t.Logf("host↔device: %d uploads (%d bytes), %d downloads (%d bytes), %d syncs", tr.Uploads, tr.UploadBytes, tr.Downloads, tr.DownloadBytes, tr.Syncs)
}
