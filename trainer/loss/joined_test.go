package loss

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// TestJoinedModelLossGolden joins the model and the loss on the golden
// weights and batch: train-mode forward on a recording tape, the E2E loss
// on the model's own outputs, the loss's output gradients seeded into the
// tape, and the parameter gradients compared with grads_epoch0. With
// complete gradients in hand it then takes the nominal MuSGD step on every
// parameter, including the 129 Muon tensors whose golden gradients are
// only sampled, and compares it with the float32 Newton–Schulz fixture at
// the stored positions.
func TestJoinedModelLossGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("full forward and backward of yolo26n-seg: skipped in -short")
	}
	out, tg, dir := goldenCase(t)
	wf, err := safetensors.ReadFile(filepath.Join(dir, "weights.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Variant: "n", Classes: 80})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadState(wf, model.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	bf, err := safetensors.ReadFile(filepath.Join(dir, "batch.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	img, shape, err := bf.Float32s("img")
	if err != nil {
		t.Fatal(err)
	}
	tp := tensor.NewTape(nil)
	mo, err := m.Forward(tp, tensor.New(cpu.Default(), img, shape...), model.Train)
	if err != nil {
		t.Fatal(err)
	}
	// The loss reads the model's outputs in place.
	out.One2Many = Branch{mo.One2Many.Boxes.Host(), mo.One2Many.Scores.Host(), mo.One2Many.MaskCoefficients.Host()}
	out.One2One = Branch{mo.One2One.Boxes.Host(), mo.One2One.Scores.Host(), mo.One2One.MaskCoefficients.Host()}
	out.Proto, out.Semseg = mo.Proto.Host(), mo.Semseg.Host()
	c, err := NewCriterion(DefaultConfig(100))
	if err != nil {
		t.Fatal(err)
	}
	g := out.Grads()
	res, err := c.Forward(out, tg, g)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(res.Total, 44.70504379272461); e > 1e-4 {
		t.Errorf("total from the model's own outputs %.7g (rel %.3g)", res.Total, e)
	}
	outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
		mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
	seeds := []*tensor.Tensor{}
	for i, s := range [][]float32{g.One2Many.Boxes, g.One2Many.Scores, g.One2Many.Coef,
		g.One2One.Boxes, g.One2One.Scores, g.One2One.Coef, g.Proto, g.Semseg} {
		seeds = append(seeds, tensor.New(cpu.Default(), s, outs[i].Shape...))
	}
	if err := tp.BackwardFrom(outs, seeds); err != nil {
		t.Fatal(err)
	}

	// Parameter gradients against the fixture.
	gf := openGolden(t, dir, "grads_epoch0.safetensors")
	var stats struct {
		Grads map[string]struct {
			Numel  int     `json:"numel"`
			Stored string  `json:"stored"`
			Sum    float64 `json:"sum"`
			AbsSum float64 `json:"abs_sum"`
			L2     float64 `json:"l2"`
			AbsMax float64 `json:"absmax"`
		} `json:"grad_stats_epoch0"`
		Norm float64 `json:"grad_norm_total_epoch0"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &stats); err != nil {
		t.Fatal(err)
	}
	// Gradients the reference itself holds at float32 noise level (a few
	// BN biases ahead of attention, absmax ~1e-8..1e-7 against a global
	// norm of 729) cannot be compared relatively: eps is an absolute floor
	// at 1e-9 of the global norm. Whole-tensor statistics are asserted for
	// every parameter; stored elements are counted and reported (element
	// accuracy of the backward pass is the model's own golden test), and
	// the loss-side seeds are already pinned element-wise by TestLossGolden.
	eps := 1e-9 * stats.Norm
	var params []*optim.Param
	before := map[string][]float32{}
	elemBad, worst := 0, 0.0
	for _, p := range m.Params() {
		v := p.Value
		grad := v.GradHostView(nil)
		st, ok := stats.Grads[p.Name]
		if !ok {
			t.Fatalf("stats.json lacks %s", p.Name)
		}
		ref := gf.f32(p.Name)
		var sum, abs, l2 float64
		for _, x := range grad {
			sum += float64(x)
			abs += math.Abs(float64(x))
			l2 += float64(x) * float64(x)
		}
		l2 = math.Sqrt(l2)
		n := float64(st.Numel)
		if math.Abs(l2-st.L2) > 1e-4*st.L2+eps*math.Sqrt(n) || math.Abs(abs-st.AbsSum) > 1e-4*st.AbsSum+eps*n ||
			math.Abs(sum-st.Sum) > 1e-4*st.AbsSum+eps*n {
			t.Errorf("grad %s: l2 %.7g/%.7g, abs_sum %.7g/%.7g, sum %.7g/%.7g", p.Name, l2, st.L2, abs, st.AbsSum, sum, st.Sum)
		}
		maxErr := 0.0
		for k, r := range ref {
			i := k
			if st.Stored != "full" {
				i = k * st.Numel / 256
			}
			maxErr = max(maxErr, math.Abs(float64(grad[i]-r)))
		}
		if maxErr > 1e-4*st.AbsMax+eps {
			elemBad++
			t.Logf("grad %s: stored elements max err %.3g = %.3g·absmax (> 1e-4)", p.Name, maxErr, maxErr/st.AbsMax)
		}
		if st.AbsMax > 1e3*eps {
			worst = max(worst, maxErr/st.AbsMax)
		}
		params = append(params, &optim.Param{Host: cpu.Default(), Name: p.Name, Shape: p.Shape, Data: v.Host(), Grad: grad, Norm: strings.Contains(p.Name, ".bn.")})
		before[p.Name] = append([]float32(nil), v.Host()...)
	}
	t.Logf("%d parameter gradients: statistics all within 1e-4; stored elements outside 1e-4·absmax: %d; worst stored-element error %.3g·absmax",
		len(params), elemBad, worst)
	if len(params) != 442 {
		t.Errorf("%d parameters, want 442", len(params))
	}

	// The nominal MuSGD step on complete gradients.
	norm := optim.GlobalNorm(params)
	if relErr(norm, stats.Norm) > 1e-4 {
		t.Errorf("global gradient norm %.6g, reference %.6g", norm, stats.Norm)
	}
	optim.ScaleGrads(params, optim.ClipCoef(norm, 10))
	groups, err := optim.BuildGroups(params, optim.GroupConfig{LR: 0.01, Momentum: 0.9, WeightDecay: 0.0005, Muon: true})
	if err != nil {
		t.Fatal(err)
	}
	sched := optim.DefaultSchedule(100, 59144, 2)
	sched.WarmupBiasLR = 0
	sched.Apply(groups, 0, sched.WarmupIters()+1)
	optim.NewMuSGD(groups, 0.5, 0.5).Step()
	ref32 := openGolden(t, dir, "musgd_step_params_fp32ns.safetensors")
	var fro []float64
	for _, gr := range groups {
		for _, p := range gr.Params {
			b := before[p.Name]
			if !gr.UseMuon {
				// The SGD groups are checked exactly, on the fixture's own
				// gradients, in trainer/optim; here they would only restate
				// the backward pass's element accuracy.
				continue
			}
			// The Muon fixture stores samples for large tensors; compare
			// the update at the stored positions.
			want := ref32.f32(p.Name)
			n := len(p.Data)
			num, den := 0.0, 0.0
			for k, w := range want {
				i := k
				if len(want) != n {
					i = k * n / 256
				}
				dr, dg := float64(w-b[i]), float64(p.Data[i]-b[i])
				num += (dg - dr) * (dg - dr)
				den += dr * dr
			}
			rel := math.Sqrt(num / den)
			fro = append(fro, rel)
			if rel > 1e-2 {
				t.Errorf("muon %s: relative Frobenius error of the update %.3g > 1e-2", p.Name, rel)
			}
		}
	}
	worstFro := 0.0
	for _, f := range fro {
		worstFro = max(worstFro, f)
	}
	t.Logf("nominal step: %d Muon tensors, worst relative Frobenius error of the update %.3g", len(fro), worstFro)
}
