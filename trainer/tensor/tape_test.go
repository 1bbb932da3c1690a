package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestNoGradRecordsNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	w := param(r, 4, 3, 3, 3)
	x := random(hostBackend, r, -1, 1, 1, 3, 5, 5)
	for name, tp := range map[string]*Tape{"nil": nil, "NoGrad": NewTape(nil).NoGrad()} {
		y := tp.SiLU(tp.Conv2d(x, w, nil, ConvOptions{Padding: 1}))
		if tp.Len() != 0 || y.RequiresGrad {
			t.Errorf("%s tape: %d ops recorded, output requires grad %v", name, tp.Len(), y.RequiresGrad)
		}
	}
	tp := NewTape(nil)
	tp.SiLU(tp.Conv2d(x, w, nil, ConvOptions{Padding: 1}))
	if tp.Len() != 2 {
		t.Fatalf("recording tape holds %d ops, want 2", tp.Len())
	}
	// Ops on constants only are not recorded either.
	tp.Reset()
	tp.Sigmoid(x)
	if tp.Len() != 0 {
		t.Fatalf("op on a constant was recorded")
	}
}

func TestDetachBlocksGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	a := param(r, 3)
	tp := NewTape(nil)
	h := tp.Square(a)
	y := tp.Add(tp.Sum(h), tp.Sum(tp.Exp(h.Detach())))
	if err := tp.Backward(y); err != nil {
		t.Fatal(err)
	}
	for i, v := range a.Host() {
		if want := 2 * v; a.GradHost()[i] != want {
			t.Fatalf("grad[%d] = %v, want %v (detached branch leaked)", i, a.GradHost()[i], want)
		}
	}
}

func TestGradientsAccumulateUntilZeroGrad(t *testing.T) {
	a := New(hostBackend, []float32{1, 2, 3}, 3)
	a.RequiresGrad = true
	step := func() {
		tp := NewTape(nil)
		if err := tp.Backward(tp.Sum(tp.Scale(a, 2))); err != nil {
			t.Fatal(err)
		}
	}
	step()
	step()
	if a.GradHost()[0] != 4 {
		t.Fatalf("after two backwards grad = %v, want 4", a.GradHost()[0])
	}
	ZeroGrad(a)
	step()
	if a.GradHost()[0] != 2 {
		t.Fatalf("after ZeroGrad and one backward grad = %v, want 2", a.GradHost()[0])
	}
}

func TestBackwardFromSeveralOutputs(t *testing.T) {
	a := New(hostBackend, []float32{1, 2}, 2)
	a.RequiresGrad = true
	tp := NewTape(nil)
	y1 := tp.Scale(a, 3)
	y2 := tp.Square(a)
	err := tp.BackwardFrom([]*Tensor{y1, y2}, []*Tensor{New(hostBackend, []float32{1, 10}, 2), New(hostBackend, []float32{100, 1000}, 2)})
	if err != nil {
		t.Fatal(err)
	}
	// d/da = 3·g1 + 2a·g2.
	if a.GradHost()[0] != 3+200 || a.GradHost()[1] != 30+4000 {
		t.Fatalf("grad %v, want [203 4030]", a.GradHost())
	}
	if tp.Len() != 0 {
		t.Fatal("backward did not release the graph")
	}
}

func TestBackwardErrors(t *testing.T) {
	a := New(hostBackend, []float32{1, 2}, 2)
	a.RequiresGrad = true
	tp := NewTape(nil)
	y := tp.Square(a)
	if err := tp.Backward(y); err == nil {
		t.Error("Backward accepted a 2-element loss")
	}
	if err := tp.BackwardFrom([]*Tensor{y}, []*Tensor{ZerosOn(hostBackend, 3)}); err == nil {
		t.Error("BackwardFrom accepted a gradient of the wrong shape")
	}
	if err := tp.BackwardFrom([]*Tensor{y}, nil); err == nil {
		t.Error("BackwardFrom accepted mismatched list lengths")
	}
	var none *Tape
	if err := none.Backward(FullOn(hostBackend, 1)); err == nil {
		t.Error("Backward on a nil tape succeeded")
	}
}

func TestOnlyLeavesKeepGradients(t *testing.T) {
	a := New(hostBackend, []float32{1, 2, 3}, 3)
	a.RequiresGrad = true
	tp := NewTape(nil)
	h := tp.Square(a)
	y := tp.Sum(tp.Mul(h, h))
	if err := tp.Backward(y); err != nil {
		t.Fatal(err)
	}
	if h.GradHost() != nil || y.GradHost() != nil {
		t.Errorf("intermediate gradients kept: h %v, y %v", h.GradHost(), y.GradHost())
	}
	// d/da (a^4) = 4a^3, computed through recycled intermediate buffers.
	for i, v := range a.Host() {
		if want := 4 * v * v * v; a.GradHost()[i] != want {
			t.Errorf("grad[%d] = %v, want %v", i, a.GradHost()[i], want)
		}
	}
}

// TestBackwardIsReproducible runs the same step twice on shapes large
// enough to take the parallel paths and demands bit-identical gradients.
func TestBackwardIsReproducible(t *testing.T) {
	run := func() [][]float32 {
		r := rand.New(rand.NewPCG(8, 8))
		x := random(hostBackend, r, -1, 1, 4, 8, 20, 20)
		a := newConvBN(r, 8, 16, 3, 1, 1, true)
		d := newConvBN(r, 16, 16, 3, 2, 16, true)
		tp := NewTape(nil)
		y := d.forward(tp, a.forward(tp, x))
		if err := tp.Backward(tp.Mean(tp.Mul(y, y))); err != nil {
			t.Fatal(err)
		}
		return [][]float32{a.w.GradHost(), a.g.GradHost(), a.b.GradHost(), d.w.GradHost(), d.g.GradHost()}
	}
	first, second := run(), run()
	for i := range first {
		for j := range first[i] {
			if math.Float32bits(first[i][j]) != math.Float32bits(second[i][j]) {
				t.Fatalf("gradient %d element %d differs between runs: %v vs %v", i, j, first[i][j], second[i][j])
			}
		}
	}
}

func TestBatchNormTrainRefusesSingleValueChannels(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("training batch-norm over one value per channel did not panic")
		}
	}()
	var tp *Tape
	tp.BatchNorm2d(ZerosOn(hostBackend, 1, 3, 1, 1), nil, nil, ZerosOn(hostBackend, 3), FullOn(hostBackend, 1, 3), BatchNormOptions{Training: true, Momentum: 0.1, Eps: 1e-5})
}

// TestRecycleOutputs checks that recycling changes no gradient, keeps the
// listed outputs and their views intact, never takes a parameter's memory
// through a view, and leaves recycled tensors without Data.
func TestRecycleOutputs(t *testing.T) {
	step := func(recycle bool) (grads [][]float32, kept, view, inter, pview *Tensor, param []float32) {
		r := rand.New(rand.NewPCG(9, 9))
		x := random(hostBackend, r, -1, 1, 2, 4, 9, 9)
		a := newConvBN(r, 4, 8, 3, 1, 1, true)
		d := newConvBN(r, 8, 8, 3, 2, 8, true)
		tp := NewTape(nil)
		inter = a.forward(tp, x)
		y := d.forward(tp, inter)
		view = tp.Reshape(y, 2, -1)
		pview = tp.Reshape(a.w, -1) // a view of a parameter, recorded because w requires grad
		loss := tp.Add(tp.Mean(tp.Mul(view, view)), tp.Sum(tp.Square(pview)))
		if recycle {
			tp.RecycleOutputs(y)
		}
		if err := tp.Backward(loss); err != nil {
			t.Fatal(err)
		}
		return [][]float32{a.w.GradHost(), a.g.GradHost(), d.w.GradHost(), d.b.GradHost()}, y, view, inter, pview, a.w.Host()
	}
	wantG, wantY, _, _, _, wantW := step(false)
	for round := 0; round < 3; round++ { // later rounds draw recycled buffers
		g, y, view, inter, pview, w := step(true)
		// Draw and scribble on pooled buffers of the kept output's and the
		// parameter's sizes: if either had been recycled, this overwrites it.
		for range 8 {
			for _, n := range []int{len(wantY.Host()), len(wantW)} {
				b := output(hostBackend, n)
				for i := range b.Host() {
					b.Host()[i] = 7
				}
			}
		}
		for i := range g {
			if !AllClose(g[i], wantG[i], 0, 0) {
				t.Fatalf("round %d: gradient %d changed under recycling", round, i)
			}
		}
		if !AllClose(y.Host(), wantY.Host(), 0, 0) || !AllClose(view.Host(), wantY.Host(), 0, 0) {
			t.Fatalf("round %d: kept output or its view lost its values", round)
		}
		if inter.Buffer().Present() || pview.Buffer().Present() {
			t.Fatalf("round %d: recycled tensors still expose Data", round)
		}
		if !AllClose(w, wantW, 0, 0) {
			t.Fatalf("round %d: a parameter's memory was recycled through a view", round)
		}
	}
}
