package cuda

import (
	"flag"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

var iterationWeights = flag.String("iteration-weights", "",
	"checkpoint the training-iteration comparison starts from (default: the golden weights)")

// goldenWeights is model.GoldenReference, the n model the PyTorch goldens
// of trainer/model were made from, failing the test on error.
func goldenWeights(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.GoldenReference()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// iterationModel returns the model the comparison starts from.
func iterationModel(t *testing.T) *model.Model {
	t.Helper()
	if *iterationWeights == "" {
		return goldenWeights(t)
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

// syntheticBatch is a deterministic batch of b images of sz×sz with two
// instances each: random pixels, boxes, and each box's rectangle as its
// mask on the prototype grid (stride 4).
func syntheticBatch(b, sz int) ([]byte, *loss.Targets) {
	rng := rand.New(rand.NewPCG(13, 17))
	img := make([]byte, b*3*sz*sz)
	for i := range img {
		img[i] = byte(rng.IntN(256))
	}
	hp := sz / 4
	tg := &loss.Targets{}
	for i := 0; i < b; i++ {
		tg.BoxesPerImage = append(tg.BoxesPerImage, 2)
		for k := 0; k < 2; k++ {
			x0, y0 := float32(rng.IntN(sz/2)), float32(rng.IntN(sz/2))
			w, h := float32(16+rng.IntN(sz/2-16)), float32(16+rng.IntN(sz/2-16))
			tg.Boxes = append(tg.Boxes, x0, y0, x0+w, y0+h)
			tg.Classes = append(tg.Classes, int32(rng.IntN(80)))
			m := make([]uint8, hp*hp)
			for y := int(y0) / 4; y < int(y0+h)/4 && y < hp; y++ {
				for x := int(x0) / 4; x < int(x0+w)/4 && x < hp; x++ {
					m[y*hp+x] = 1
				}
			}
			tg.Masks = append(tg.Masks, m...)
		}
	}
	return img, tg
}

// modelLoss runs m's forward pass in training mode on be over
// syntheticBatch(b, sz): the tape, the eight head outputs the loss reads
// and, on the host, the loss's view of them and the batch's targets.
func modelLoss(t *testing.T, be backend.Backend, m *model.Model, b, sz int) (*tensor.Tape, []*tensor.Tensor, *loss.Outputs, *loss.Targets) {
	t.Helper()
	m.To(be)
	img, tg := syntheticBatch(b, sz)
	tp := tensor.NewTape(be)
	x := tensor.UploadBytes(be, img, 1.0/255, b, 3, sz, sz)
	mo, err := m.Forward(tp, x, model.Train)
	if err != nil {
		t.Fatal(err)
	}
	outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
		mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
	var h [8][]float32
	for i, o := range outs {
		h[i] = o.ToHost(nil)
	}
	geo := loss.Geometry{B: mo.Proto.Shape[0], NC: m.Config.Classes, NM: mo.Proto.Shape[1],
		ProtoH: mo.Proto.Shape[2], ProtoW: mo.Proto.Shape[3], SemH: mo.Semseg.Shape[2], SemW: mo.Semseg.Shape[3]}
	for i, f := range mo.Feats {
		geo.Levels = append(geo.Levels, loss.Level{H: f.Shape[2], W: f.Shape[3], Stride: float32(model.Strides[i])})
	}
	out := &loss.Outputs{Geometry: geo,
		One2Many: loss.Branch{Boxes: h[0], Scores: h[1], Coef: h[2]},
		One2One:  loss.Branch{Boxes: h[3], Scores: h[4], Coef: h[5]},
		Proto:    h[6], Semseg: h[7]}
	return tp, outs, out, tg
}

// trainIteration runs one training iteration as the trainer's step does
// (forward in training mode, the loss on the host, backward from its
// output gradients) on be, from iterationModel, on syntheticBatch(b, sz).
func trainIteration(t *testing.T, be backend.Backend, b, sz int) iterationResult {
	t.Helper()
	m := iterationModel(t)
	tp, outs, out, tg := modelLoss(t, be, m, b, sz)
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
	be, _ := newHarnessBackend(t)
	want := trainIteration(t, cpu.New(), 2, 64)
	got := trainIteration(t, be, 2, 64)
	compareIterations(t, got, want, 1e-3)
}

// TestIterationOnGPU is the same comparison on GPU 0 at the size the GPU
// check names: variant n, batch 2, 256 px, TF32 off, 1e-3.
func TestIterationOnGPU(t *testing.T) {
	be := openGPUBackend(t)
	want := trainIteration(t, cpu.New(), 2, 256)
	got := trainIteration(t, be, 2, 256)
	compareIterations(t, got, want, 1e-3)
	tr := be.Transfers()
	t.Logf("host↔device: %d uploads (%d bytes), %d downloads (%d bytes), %d syncs", tr.Uploads, tr.UploadBytes, tr.Downloads, tr.DownloadBytes, tr.Syncs)
}
