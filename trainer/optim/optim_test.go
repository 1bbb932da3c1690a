package optim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ns5F64 is the Newton–Schulz iteration in float64 with plain loops, the
// oracle for the float32 implementation.
func ns5F64(g []float32, rows, cols int) []float64 {
	r, c := rows, cols
	tr := rows > cols
	if tr {
		r, c = cols, rows
	}
	x := make([]float64, r*c)
	norm := 0.0
	for _, v := range g {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm) + 1e-7
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			v := float64(g[i*cols+j]) / norm
			if tr {
				x[j*rows+i] = v
			} else {
				x[i*cols+j] = v
			}
		}
	}
	for s := 0; s < 5; s++ {
		a := make([]float64, r*r)
		for i := 0; i < r; i++ {
			for j := 0; j < r; j++ {
				for k := 0; k < c; k++ {
					a[i*r+j] += x[i*c+k] * x[j*c+k]
				}
			}
		}
		b := make([]float64, r*r)
		for i := 0; i < r; i++ {
			for j := 0; j < r; j++ {
				aa := 0.0
				for k := 0; k < r; k++ {
					aa += a[i*r+k] * a[k*r+j]
				}
				b[i*r+j] = -4.7750*a[i*r+j] + 2.0315*aa
			}
		}
		nx := make([]float64, r*c)
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				v := 3.4445 * x[i*c+j]
				for k := 0; k < r; k++ {
					v += b[i*r+k] * x[k*c+j]
				}
				nx[i*c+j] = v
			}
		}
		x = nx
	}
	out := make([]float64, rows*cols)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			if tr {
				out[i*cols+j] = x[j*rows+i]
			} else {
				out[i*cols+j] = x[i*cols+j]
			}
		}
	}
	return out
}

func TestNewtonSchulzMatchesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][2]int{{4, 16}, {16, 4}, {32, 32}, {24, 72}, {80, 9}} {
		rows, cols := sh[0], sh[1]
		g := make([]float32, rows*cols)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 1e-3)
		}
		var ns newtonSchulz
		out := make([]float32, rows*cols)
		ns.orthogonalise(out, g, rows, cols)
		want := ns5F64(g, rows, cols)
		num, den := 0.0, 0.0
		for i := range want {
			d := float64(out[i]) - want[i]
			num += d * d
			den += want[i] * want[i]
		}
		if rel := math.Sqrt(num / den); rel > 1e-5 {
			t.Errorf("%dx%d: relative Frobenius error %.3g vs float64", rows, cols, rel)
		}
		// NS5 pushes every singular value into roughly [0.7, 1.2]: the
		// squared Frobenius norm is about min(rows, cols).
		if n := den / float64(min(rows, cols)); n < 0.4 || n > 1.5 {
			t.Errorf("%dx%d: mean squared singular value %.3g outside NS5's band", rows, cols, n)
		}
	}
}

// TestSGDMatchesFormula runs three SGD steps against the PyTorch SGD
// recurrence in float64.
func TestSGDMatchesFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := &Param{Host: hostCPU, Name: "w", Shape: []int{6}, Data: make([]float32, 6), Grad: make([]float32, 6)}
	for i := range p.Data {
		p.Data[i] = float32(rng.NormFloat64())
	}
	ref := make([]float64, 6)
	buf := make([]float64, 6)
	for i := range ref {
		ref[i] = float64(p.Data[i])
	}
	groups, _ := BuildGroups([]*Param{p}, GroupConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01})
	opt := NewSGD(groups)
	for step := 0; step < 3; step++ {
		for i := range p.Grad {
			p.Grad[i] = float32(rng.NormFloat64())
			g := float64(p.Grad[i]) + 0.01*ref[i]
			if step == 0 {
				buf[i] = g
			} else {
				buf[i] = 0.9*buf[i] + g
			}
			ref[i] -= 0.1 * (g + 0.9*buf[i])
		}
		opt.Step()
	}
	for i := range ref {
		if math.Abs(float64(p.Data[i])-ref[i]) > 1e-5 {
			t.Errorf("p[%d] = %v, formula %v", i, p.Data[i], ref[i])
		}
	}
}

// TestAdamWMatchesFormula runs three AdamW steps against PyTorch's AdamW
// recurrence in float64.
func TestAdamWMatchesFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := &Param{Host: hostCPU, Name: "w", Shape: []int{5}, Data: make([]float32, 5), Grad: make([]float32, 5)}
	for i := range p.Data {
		p.Data[i] = float32(rng.NormFloat64())
	}
	ref, m, v := make([]float64, 5), make([]float64, 5), make([]float64, 5)
	for i := range ref {
		ref[i] = float64(p.Data[i])
	}
	const lr, wd, b1, b2 = 0.01, 0.05, 0.9, 0.999
	groups, _ := BuildGroups([]*Param{p}, GroupConfig{LR: lr, Momentum: b1, WeightDecay: wd})
	opt := NewAdamW(groups, b1)
	for step := 1; step <= 3; step++ {
		for i := range p.Grad {
			p.Grad[i] = float32(rng.NormFloat64())
			g := float64(p.Grad[i])
			ref[i] *= 1 - lr*wd
			m[i] = b1*m[i] + (1-b1)*g
			v[i] = b2*v[i] + (1-b2)*g*g
			mh := m[i] / (1 - math.Pow(b1, float64(step)))
			vh := v[i] / (1 - math.Pow(b2, float64(step)))
			ref[i] -= lr * mh / (math.Sqrt(vh) + 1e-8)
		}
		opt.Step()
	}
	for i := range ref {
		if math.Abs(float64(p.Data[i])-ref[i]) > 1e-5 {
			t.Errorf("p[%d] = %v, formula %v", i, p.Data[i], ref[i])
		}
	}
}

func TestMuSGDMuonPartUsesNesterovMomentum(t *testing.T) {
	// With fresh buffers the Muon input is (1 − μ²)·g, and NS5 is scale
	// invariant, so the Muon part equals NS5(g).
	rng := rand.New(rand.NewPCG(7, 8))
	p := &Param{Host: hostCPU, Name: "model.0.conv.weight", Shape: []int{4, 2, 3, 3}, Data: make([]float32, 72), Grad: make([]float32, 72)}
	for i := range p.Grad {
		p.Grad[i] = float32(rng.NormFloat64())
	}
	groups, _ := BuildGroups([]*Param{p}, GroupConfig{LR: 0.1, Momentum: 0.9, Muon: true})
	opt := NewMuSGD(groups, 1, 0)
	opt.Step()
	want := ns5F64(p.Grad, 4, 18)
	for i := range want {
		if math.Abs(float64(p.Data[i])+0.1*want[i]) > 1e-5 {
			t.Fatalf("p[%d] = %v, want %v", i, p.Data[i], -0.1*want[i])
		}
	}
}

func TestKindAndFastRules(t *testing.T) {
	cases := []struct {
		p    Param
		kind Kind
		fast bool
	}{
		{Param{Name: "model.0.conv.weight", Shape: []int{16, 3, 3, 3}}, KindMuon, false},
		{Param{Name: "model.0.bn.weight", Shape: []int{16}, Norm: true}, KindNorm, false},
		{Param{Name: "model.0.bn.bias", Shape: []int{16}, Norm: true}, KindBias, false},
		{Param{Name: "model.23.cv3.0.2.bias", Shape: []int{80}}, KindBias, true},
		{Param{Name: "model.23.one2one_cv3.1.0.0.conv.weight", Shape: []int{64, 1, 3, 3}}, KindMuon, true},
		{Param{Name: "model.23.proto.semseg.2.weight", Shape: []int{80, 32, 1, 1}}, KindMuon, true},
		{Param{Name: "model.23.proto.cv3.conv.weight", Shape: []int{32, 32, 1, 1}}, KindMuon, true},
		{Param{Name: "model.23.cv2.0.2.weight", Shape: []int{4, 16, 1, 1}}, KindMuon, false},
		{Param{Name: "model.2.cv3.bn.weight", Shape: []int{8}, Norm: true}, KindNorm, false},
		{Param{Name: "logit_scale", Shape: []int{1}}, KindNorm, false},
		{Param{Name: "scale", Shape: []int{1}}, KindWeight, false},
	}
	for _, tc := range cases {
		if k := KindOf(&tc.p, true); k != tc.kind {
			t.Errorf("%s: kind %v, want %v", tc.p.Name, k, tc.kind)
		}
		if f := IsFast(tc.p.Name); f != tc.fast {
			t.Errorf("%s: fast %v, want %v", tc.p.Name, f, tc.fast)
		}
	}
	if k := KindOf(&Param{Name: "w", Shape: []int{3, 3}}, false); k != KindWeight {
		t.Errorf("ndim 2 without Muon: %v, want weight", k)
	}
}

func TestBuildGroupsRejectsBadParams(t *testing.T) {
	p := &Param{Host: hostCPU, Name: "a", Shape: []int{2, 2}, Data: make([]float32, 4), Grad: make([]float32, 3)}
	if _, err := BuildGroups([]*Param{p}, GroupConfig{}); err == nil {
		t.Error("gradient of the wrong length accepted")
	}
	q := &Param{Host: hostCPU, Name: "b", Shape: []int{2}, Data: make([]float32, 2), Grad: make([]float32, 2)}
	if _, err := BuildGroups([]*Param{q, q}, GroupConfig{}); err == nil {
		t.Error("duplicate parameter accepted")
	}
	r := &Param{Host: hostCPU, Name: "c", Shape: []int{2}, Data: make([]float32, 2), Grad: make([]float32, 2)}
	place(testBackends[2], []*Param{r})
	if _, err := BuildGroups([]*Param{q, r}, GroupConfig{}); err == nil {
		t.Error("parameters on two backends accepted")
	}
}

func TestScheduleWarmupAndDecay(t *testing.T) {
	s := DefaultSchedule(100, 10, 2) // nw = max(round(30), 100) = 100
	if nw := s.WarmupIters(); nw != 100 {
		t.Fatalf("warmup iterations %d, want 100", nw)
	}
	if s2 := DefaultSchedule(10, 1000, 16); s2.WarmupIters() != 3000 {
		t.Errorf("warmup iterations %d, want 3000", s2.WarmupIters())
	}
	mk := func() []*Group {
		return []*Group{{Kind: KindMuon, InitialLR: 0.01}, {Kind: KindBias, InitialLR: 0.03}}
	}
	cases := []struct {
		epoch, ni, acc int
		lrMuon, lrBias float64
		momentum, atol float64
	}{
		{0, 0, 1, 0, 0.1, 0.8, 1e-15},
		{0, 50, 16, 0.005, 0.065, 0.8685, 1e-12}, // accumulate round(16.5) = 16 (half to even)
		{0, 100, 32, 0.01, 0.03, 0.937, 1e-15},
		{0, 101, 32, 0.01, 0.03, 0.937, 1e-15},
		{50, 6000, 32, 0.01 * (0.5*0.99 + 0.01), 0.03 * (0.5*0.99 + 0.01), 0.937, 1e-15},
		{99, 9999, 32, 0.01 * (0.01*0.99 + 0.01), 0.03 * (0.01*0.99 + 0.01), 0.937, 1e-15},
	}
	for _, tc := range cases {
		g := mk()
		acc := s.Apply(g, tc.epoch, tc.ni)
		if acc != tc.acc || math.Abs(g[0].LR-tc.lrMuon) > tc.atol || math.Abs(g[1].LR-tc.lrBias) > tc.atol || math.Abs(g[0].Momentum-tc.momentum) > 1e-12 {
			t.Errorf("epoch %d ni %d: acc %d lr %v/%v momentum %v; want %d %v/%v %v", tc.epoch, tc.ni, acc, g[0].LR, g[1].LR, g[0].Momentum, tc.acc, tc.lrMuon, tc.lrBias, tc.momentum)
		}
	}
	if lf := s.LF(100); math.Abs(lf-0.01) > 1e-15 {
		t.Errorf("LF(epochs) = %v, want lrf", lf)
	}
}

func TestAccumulatorSteps(t *testing.T) {
	var a Accumulator
	var steps []int
	for ni := 0; ni < 12; ni++ {
		acc := 1
		if ni >= 3 {
			acc = 4
		}
		if a.Due(ni, acc) {
			steps = append(steps, ni)
		}
	}
	want := []int{0, 1, 2, 6, 10}
	if len(steps) != len(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Fatalf("steps %v, want %v", steps, want)
		}
	}
	var b Accumulator
	b.Restore(a.Last())
	if b.Due(13, 4) || !b.Due(14, 4) {
		t.Error("restored accumulator does not continue the schedule")
	}
}

func TestAutoSettings(t *testing.T) {
	big, err := Auto(118287, 2, 64, 100, 80)
	if err != nil {
		t.Fatal(err)
	}
	if big.Iterations != 184900 || big.LR != 0.01 || big.MuonWeight != 0.5 || big.SGDWeight != 0.5 {
		t.Errorf("COCO-sized auto: %+v", big)
	}
	small, _ := Auto(16, 8, 64, 100, 80)
	if small.Iterations != 100 || small.LR != 0.000119 || small.MuonWeight != 0.1 || small.SGDWeight != 1 {
		t.Errorf("small auto: %+v", small)
	}
	if _, err := Auto(0, 8, 64, 1, 80); err == nil {
		t.Error("zero images accepted")
	}
	for _, tc := range []struct {
		batch int
		want  float64
	}{{2, 0.0005}, {16, 0.0005}, {48, 0.0005 * 48 / 64}, {128, 0.001}} {
		if got := ScaledWeightDecay(0.0005, tc.batch, 64); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("batch %d: decay %v, want %v", tc.batch, got, tc.want)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	ps := []*Param{{Host: hostCPU, Grad: []float32{3, 0}}, {Host: hostCPU, Grad: []float32{0, 4}}}
	if n := ClipGradNorm(ps, 10); n != 5 || ps[0].Grad[0] != 3 {
		t.Errorf("norm 5 under max 10: norm %v, grads %v", n, ps[0].Grad)
	}
	if n := ClipGradNorm(ps, 1); n != 5 || math.Abs(float64(ps[1].Grad[1])-0.8) > 1e-6 {
		t.Errorf("norm 5 clipped to 1: norm %v, grad %v", n, ps[1].Grad[1])
	}
	if c := ClipCoef(729.482666015625, 10); math.Abs(c-0.013708344902711455) > 1e-15 {
		t.Errorf("clip coefficient %v", c)
	}
}

func TestEMA(t *testing.T) {
	state := [][]float32{{1, 2}, {3}}
	e := NewEMA(hostCPU, state)
	ref := []float64{1, 2, 3}
	for u := 1; u <= 5; u++ {
		state[0][0] += 1
		state[0][1] -= 0.5
		state[1][0] *= 1.1
		if err := e.Update(state); err != nil {
			t.Fatal(err)
		}
		d := 0.9999 * (1 - math.Exp(-float64(u)/2000))
		cur := []float64{float64(state[0][0]), float64(state[0][1]), float64(state[1][0])}
		for i := range ref {
			ref[i] = d*ref[i] + (1-d)*cur[i]
		}
	}
	got := []float32{e.Values()[0][0], e.Values()[0][1], e.Values()[1][0]}
	for i := range ref {
		if math.Abs(float64(got[i])-ref[i]) > 1e-5 {
			t.Errorf("ema[%d] = %v, want %v", i, got[i], ref[i])
		}
	}
	if e.Updates != 5 {
		t.Errorf("updates %d", e.Updates)
	}
	if err := e.Update([][]float32{{1}}); err == nil {
		t.Error("mismatched state accepted")
	}
}

// TestStateRoundTrip checks that an optimiser rebuilt from State continues
// exactly like the original, for every optimiser.
func TestStateRoundTrip(t *testing.T) {
	mk := func() []*Param { return randomParams(9) }
	setGrads := func(ps []*Param, seed uint64) { randomGrads(ps, seed, 1) }
	for _, tc := range []struct {
		name string
		muon bool
		mk   func([]*Group) Optimizer
	}{
		{"MuSGD", true, func(g []*Group) Optimizer { return NewMuSGD(g, 0.5, 0.5) }},
		{"SGD", false, func(g []*Group) Optimizer { return NewSGD(g) }},
		{"AdamW", false, func(g []*Group) Optimizer { return NewAdamW(g, 0.9) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := GroupConfig{LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, Muon: tc.muon}
			a := mk()
			ga, _ := BuildGroups(a, cfg)
			oa := tc.mk(ga)
			for s := uint64(0); s < 2; s++ {
				setGrads(a, s)
				oa.Step()
			}
			b := mk()
			for i := range b {
				copy(b[i].Data, a[i].Data)
			}
			gb, _ := BuildGroups(b, cfg)
			ob := tc.mk(gb)
			if err := ob.LoadState(oa.State()); err != nil {
				t.Fatal(err)
			}
			setGrads(a, 7)
			setGrads(b, 7)
			oa.Step()
			ob.Step()
			for i := range a {
				for j := range a[i].Data {
					if a[i].Data[j] != b[i].Data[j] {
						t.Fatalf("%s[%d]: %v continued, %v restored", a[i].Name, j, a[i].Data[j], b[i].Data[j])
					}
				}
			}
			bad := oa.State()
			for k, v := range bad {
				bad[k] = v[:0]
				break
			}
			if err := ob.LoadState(bad); err == nil {
				t.Error("truncated state accepted")
			}
			if err := ob.LoadState(map[string][]float32{"nope.momentum_buffer": {1}}); err == nil {
				t.Error("state of an unknown parameter accepted")
			}
		})
	}
}
