package optim

import (
	"math/rand/v2"
	"testing"
)

// benchParams returns yolo26n-seg's 442 parameters (shapes of the golden
// weights) with random gradients.
func benchParams(b *testing.B) []*Param {
	gm := loadGolden(b)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range gm.params {
		for i := range p.Grad {
			p.Grad[i] = float32(rng.NormFloat64() * 1e-3)
		}
	}
	return gm.params
}

// BenchmarkStep times one optimiser step over the whole yolo26n-seg
// parameter set: MuSGD (Newton–Schulz on all 154 conv weights) against
// plain SGD on the same parameters as the baseline.
func BenchmarkStep(b *testing.B) {
	params := benchParams(b)
	for _, tc := range []struct {
		name string
		mk   func([]*Group) Optimizer
		muon bool
	}{
		{"MuSGD", func(g []*Group) Optimizer { return NewMuSGD(g, 0.5, 0.5) }, true},
		{"SGD", func(g []*Group) Optimizer { return NewSGD(g) }, false},
		{"AdamW", func(g []*Group) Optimizer { return NewAdamW(g, 0.937) }, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			groups, err := BuildGroups(params, GroupConfig{LR: 1e-9, Momentum: 0.937, WeightDecay: 5e-4, Muon: tc.muon})
			if err != nil {
				b.Fatal(err)
			}
			o := tc.mk(groups)
			o.Step()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o.Step()
			}
		})
	}
}
