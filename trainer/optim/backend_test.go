package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// testBackend is a backend the optimiser tests run on; nil new means the
// host form (Params over host slices, the CPU reference).
type testBackend struct {
	name string
	new  func() backend.HostBackend
}

// hostCPU is the CPU backend the tests' host-form parameters and EMAs
// run on (Param.Host, NewEMA).
var hostCPU = cpu.New()

var testBackends = []testBackend{
	{"host", nil},
	{"cpu", func() backend.HostBackend { return cpu.New() }},
	{"emu", func() backend.HostBackend { return cpu.NewEmulated() }},
}

// place gives host-form params buffers of their own on tb's backend,
// holding copies of Data and Grad; the host slices then mirror them
// through push and pull. The host form keeps its slices as its memory.
func place(tb testBackend, ps []*Param) {
	if tb.new == nil {
		return
	}
	be := tb.new()
	for _, p := range ps {
		p.Backend, p.Kernels, p.Value, p.Gradient = be, HostKernels(be), upload(be, p.Data), upload(be, p.Grad)
	}
}

// push copies the host gradients onto the backend (a no-op for the host
// form).
func push(ps []*Param) {
	for _, p := range ps {
		if err := p.bind(); err != nil {
			panic(err)
		}
		if h := p.Backend.Host(p.Gradient); len(h) == 0 || &h[0] != &p.Grad[0] {
			p.Backend.Upload(p.Gradient, p.Grad)
		}
	}
}

// pull copies the backend's values and gradients into the host mirrors.
func pull(ps []*Param) {
	for _, p := range ps {
		p.Backend.Download(p.Data, p.Value)
		p.Backend.Download(p.Grad, p.Gradient)
	}
}

// onEveryBackend runs f on each test backend and requires every result
// to equal the host form's (the first) bit for bit.
func onEveryBackend(t *testing.T, f func(*testing.T, testBackend) map[string][]float32) {
	var ref map[string][]float32
	for _, tb := range testBackends {
		t.Run(tb.name, func(t *testing.T) {
			got := f(t, tb)
			if ref == nil {
				ref = got
				return
			}
			for k, v := range ref {
				sameBits(t, k, got[k], v)
			}
		})
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, reference %v (not bit-identical)", what, i, got[i], want[i])
		}
	}
}

// randomParams is a small model: a wide and a tall Muon matrix, a conv
// weight, norm and bias vectors, with random values.
func randomParams(seed uint64) []*Param {
	rng := rand.New(rand.NewPCG(seed, 99))
	ps := []*Param{
		{Host: hostCPU, Name: "model.0.conv.weight", Shape: []int{8, 3, 3, 3}},
		{Host: hostCPU, Name: "model.1.conv.weight", Shape: []int{40, 6, 1, 1}},
		{Host: hostCPU, Name: "model.23.cv3.0.0.conv.weight", Shape: []int{6, 40}},
		{Host: hostCPU, Name: "model.0.bn.weight", Shape: []int{8}, Norm: true},
		{Host: hostCPU, Name: "model.0.bn.bias", Shape: []int{8}, Norm: true},
		{Host: hostCPU, Name: "model.23.cv3.0.2.bias", Shape: []int{5}},
	}
	for _, p := range ps {
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		p.Data, p.Grad = make([]float32, n), make([]float32, n)
		for i := range p.Data {
			p.Data[i] = float32(rng.NormFloat64())
		}
	}
	return ps
}

func randomGrads(ps []*Param, seed uint64, scale float64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, p := range ps {
		for i := range p.Grad {
			p.Grad[i] = float32(rng.NormFloat64() * scale)
		}
	}
}

// TestBackendsMatchHostForm runs a few training iterations' worth of every
// optimiser — clip, step, zero, EMA, a state save and reload half-way — on
// each backend, and requires every value, gradient, buffer and average to
// equal the host form's bit for bit, and none of it may cross.
func TestBackendsMatchHostForm(t *testing.T) {
	opts := []struct {
		name string
		muon bool
		mk   func([]*Group) Optimizer
	}{
		{"MuSGD", true, func(g []*Group) Optimizer { return NewMuSGD(g, 0.5, 0.5) }},
		{"SGD", false, func(g []*Group) Optimizer { return NewSGD(g) }},
		{"AdamW", false, func(g []*Group) Optimizer { return NewAdamW(g, 0.9) }},
	}
	type result struct {
		values, grads, ema [][]float32
		state              map[string][]float32
		norms              []float64
	}
	run := func(t *testing.T, tb testBackend, muon bool, mk func([]*Group) Optimizer) result {
		ps := randomParams(1)
		place(tb, ps)
		be, k := mustBackend(ps)
		cfg := GroupConfig{LR: 0.02, Momentum: 0.9, WeightDecay: 5e-4, Muon: muon}
		groups, err := BuildGroups(ps, cfg)
		if err != nil {
			t.Fatal(err)
		}
		o := mk(groups)
		var avg, state []backend.Buffer
		for _, p := range ps {
			avg = append(avg, be.Alloc(p.Value.Len))
			state = append(state, p.Value)
		}
		ema, err := NewEMAOn(be, k, avg, state)
		if err != nil {
			t.Fatal(err)
		}
		ema.Tau = 3
		var res result
		crossed := false
		kernel := func(f func()) { // f must not cross on cpu and emu
			t0 := be.Transfers()
			f()
			crossed = crossed || be.Transfers() != t0
		}
		for it := uint64(0); it < 4; it++ {
			if it == 2 { // a checkpoint: state out, a fresh optimiser in
				saved := o.State()
				groups, err := BuildGroups(ps, cfg)
				if err != nil {
					t.Fatal(err)
				}
				o = mk(groups)
				if err := o.LoadState(saved); err != nil {
					t.Fatal(err)
				}
				var vals [][]float32
				for _, v := range ema.Values() {
					vals = append(vals, append([]float32(nil), v...)) // the CPU's are the average itself
				}
				ema2, err := NewEMAOn(be, k, avg, state)
				if err != nil {
					t.Fatal(err)
				}
				ema2.Tau, ema2.Updates = ema.Tau, ema.Updates
				if err := ema2.Load(vals); err != nil {
					t.Fatal(err)
				}
				ema = ema2
			}
			randomGrads(ps, it, 3)
			push(ps)
			for _, g := range groups {
				g.LR *= 1.5
			}
			kernel(func() {
				res.norms = append(res.norms, ClipGradNorm(ps, 10))
				o.Step()
			})
			if it == 1 {
				pull(ps) // gradients after the step, before zeroing
				for _, p := range ps {
					res.grads = append(res.grads, append([]float32(nil), p.Grad...))
				}
			}
			kernel(func() {
				ZeroGrad(ps)
				if err := ema.UpdateOn(state); err != nil {
					t.Fatal(err)
				}
			})
		}
		if crossed && tb.new != nil {
			t.Errorf("%s: the kernels crossed", tb.name)
		}
		pull(ps)
		for _, p := range ps {
			res.values = append(res.values, p.Data)
			sameBits(t, tb.name+" zeroed "+p.Name, p.Grad, make([]float32, len(p.Grad)))
		}
		res.ema = ema.Values()
		res.state = o.State()
		return res
	}
	for _, oc := range opts {
		t.Run(oc.name, func(t *testing.T) {
			ref := run(t, testBackends[0], oc.muon, oc.mk)
			for _, tb := range testBackends[1:] {
				got := run(t, tb, oc.muon, oc.mk)
				for i := range ref.values {
					sameBits(t, tb.name+" value", got.values[i], ref.values[i])
					sameBits(t, tb.name+" gradient", got.grads[i], ref.grads[i])
					sameBits(t, tb.name+" ema", got.ema[i], ref.ema[i])
				}
				for i, n := range ref.norms {
					if got.norms[i] != n {
						t.Errorf("%s: norm %d = %v, reference %v", tb.name, i, got.norms[i], n)
					}
				}
				if len(got.state) != len(ref.state) {
					t.Fatalf("%s: %d state buffers, reference %d", tb.name, len(got.state), len(ref.state))
				}
				for k, v := range ref.state {
					sameBits(t, tb.name+" state "+k, got.state[k], v)
				}
			}
		})
	}
}
