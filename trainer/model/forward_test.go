package model

import (
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

func TestForwardShapes(t *testing.T) {
	m, err := New(Config{Variant: "n", Classes: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	x := randomInput(2, 2, 3, 64, 96)
	const a = 8*12 + 4*6 + 2*3
	want := func(name string, got *tensor.Tensor, shape ...int) {
		t.Helper()
		if got == nil || !tensor.SameShape(got, tensor.ZerosOn(cpu.Default(), shape...)) {
			t.Errorf("%s: got %v, want %v", name, got, shape)
		}
	}
	out, err := m.Forward(nil, x, Train)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*Branch{out.One2Many, &out.One2One} {
		want("boxes", b.Boxes, 2, 4, a)
		want("scores", b.Scores, 2, 5, a)
		want("mask coefficients", b.MaskCoefficients, 2, 32, a)
	}
	want("proto", out.Proto, 2, 32, 16, 24)
	want("semseg", out.Semseg, 2, 5, 8, 12)
	want("P5", out.Feats[2], 2, 256, 2, 3)

	ev, err := m.Forward(nil, x, Eval)
	if err != nil {
		t.Fatal(err)
	}
	if ev.One2Many != nil || ev.Semseg != nil {
		t.Error("eval mode returned training-only outputs")
	}
	want("eval boxes", ev.One2One.Boxes, 2, 4, a)
	want("eval proto", ev.Proto, 2, 32, 16, 24)
}

func TestForwardRejectsBadInput(t *testing.T) {
	m, _ := New(Config{Variant: "n"})
	for _, x := range []*tensor.Tensor{nil, tensor.ZerosOn(cpu.Default(), 1, 3, 60, 64), tensor.ZerosOn(cpu.Default(), 1, 1, 64, 64), tensor.ZerosOn(cpu.Default(), 3, 64, 64), {Shape: []int{1, 3, 64, 64}}} {
		if _, err := m.Forward(nil, x, Eval); err == nil {
			t.Errorf("input %v accepted", shapeOrNil(x))
		}
	}
	if _, err := m.Forward(nil, tensor.ZerosOn(cpu.Default(), 1, 3, 32, 32), Train); err == nil {
		t.Error("train mode accepted one value per channel at stride 32")
	}
	if _, err := m.Forward(nil, tensor.ZerosOn(cpu.Default(), 2, 3, 32, 32), Train); err != nil {
		t.Errorf("train mode with batch 2 at 32x32: %v", err)
	}
	d, _ := Describe(Config{Variant: "n"})
	if _, err := d.Forward(nil, tensor.ZerosOn(cpu.Default(), 1, 3, 64, 64), Eval); err != ErrNoWeights {
		t.Errorf("Describe model forward: %v", err)
	}
	f, _ := m.Deploy(true)
	if _, err := f.Forward(nil, tensor.ZerosOn(cpu.Default(), 1, 3, 64, 64), Train); err == nil {
		t.Error("fused model accepted train mode")
	}
}

// TestDeployedForwardEqualsFullEval: the deployed model computes exactly
// the full model's eval outputs (it shares the modules), and the fused one
// the same up to rounding of the folded weights.
func TestDeployedForwardEqualsFullEval(t *testing.T) {
	m, _ := New(Config{Variant: "n", Seed: 4})
	// Move running statistics off 0/1 so folding is not trivial.
	for i := range 2 {
		if _, err := m.Forward(nil, randomInput(uint64(10+i), 2, 3, 64, 64), Train); err != nil {
			t.Fatal(err)
		}
	}
	x := randomInput(7, 1, 3, 64, 64)
	full, _ := m.Forward(nil, x, Eval)
	d, _ := m.Deploy(false)
	dep, _ := d.Forward(nil, x, Eval)
	fd, _ := m.Deploy(true)
	fused, _ := fd.Forward(nil, x, Eval)
	pairs := []struct {
		name string
		a, b *tensor.Tensor
	}{
		{"boxes", full.One2One.Boxes, dep.One2One.Boxes},
		{"scores", full.One2One.Scores, dep.One2One.Scores},
		{"mask", full.One2One.MaskCoefficients, dep.One2One.MaskCoefficients},
		{"proto", full.Proto, dep.Proto},
	}
	for _, p := range pairs {
		for i := range p.a.Host() {
			if p.a.Host()[i] != p.b.Host()[i] {
				t.Fatalf("deployed %s differs at %d", p.name, i)
			}
		}
	}
	compareTensor(t, "fused boxes", fused.One2One.Boxes, full.One2One.Boxes, 1e-4)
	compareTensor(t, "fused scores", fused.One2One.Scores, full.One2One.Scores, 1e-4)
	compareTensor(t, "fused mask", fused.One2One.MaskCoefficients, full.One2One.MaskCoefficients, 1e-4)
	compareTensor(t, "fused proto", fused.Proto, full.Proto, 1e-4)
}

// TestOne2OneGradientStopsAtHead: a loss on the one-to-one outputs trains
// only the one-to-one branches; one on the one-to-many outputs never
// reaches them.
func TestOne2OneGradientStopsAtHead(t *testing.T) {
	m, _ := New(Config{Variant: "n", Seed: 5})
	for _, c := range []struct {
		name   string
		pick   func(*Output) *tensor.Tensor
		inside string // prefix of parameters that may get gradient
		exact  bool
	}{
		{"one2one", func(o *Output) *tensor.Tensor { return o.One2One.Scores }, "model.23.one2one_cv3.", true},
		{"one2many", func(o *Output) *tensor.Tensor { return o.One2Many.Scores }, "model.23.one2one", false},
	} {
		for _, p := range m.Params() {
			p.Value.ZeroGrad()
		}
		tp := tensor.NewTape(nil)
		out, err := m.Forward(tp, randomInput(3, 1, 3, 64, 64), Train)
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Backward(tp.Sum(c.pick(out))); err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Params() {
			has := false
			for _, g := range p.Value.GradHost() {
				if g != 0 {
					has = true
					break
				}
			}
			in := len(p.Name) >= len(c.inside) && p.Name[:len(c.inside)] == c.inside
			if c.exact && has != in && !(in && !has) {
				t.Errorf("%s loss: %s has gradient %v", c.name, p.Name, has)
			}
			if !c.exact && in && has {
				t.Errorf("%s loss reached %s", c.name, p.Name)
			}
		}
	}
}

// TestForwardElementsBoundsTheTape: the shape-only count of a training
// forward's outputs (what memory estimates use) against what a real
// forward on the CPU backend leaves on its tape, at two sizes and
// batches: the same number of elements at batch 2; at batch 1 the channel
// splits are views of their input (tensor.Split), which the count, made
// for training batches, still counts as copies: an upper bound there.
func TestForwardElementsBoundsTheTape(t *testing.T) {
	m, err := New(Config{Variant: "n", Classes: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ batch, imgsz int }{{1, 64}, {2, 96}} {
		tp := tensor.NewTape(nil)
		if _, err := m.Forward(tp, randomInput(3, c.batch, 3, c.imgsz, c.imgsz), Train); err != nil {
			t.Fatal(err)
		}
		held := tp.HeldElements()
		per, err := m.ForwardElements(c.imgsz)
		if err != nil {
			t.Fatal(err)
		}
		counted := per * int64(c.batch)
		if held == 0 || counted < held || c.batch > 1 && counted != held {
			t.Errorf("batch %d imgsz %d: counted %d elements, the tape holds %d", c.batch, c.imgsz, counted, held)
		}
		tp.Reset()
	}
	if _, err := m.ForwardElements(100); err == nil {
		t.Error("imgsz 100 accepted")
	}
}
