package model

import "math/rand/v2"

// GoldenReference returns the variant-n model (80 classes) that the
// PyTorch goldens in trainer/model/testdata were made from, and that other
// backends' whole-model checks start from: the seeded initialisation with
// every BatchNorm's affine parameters and running statistics moved off
// their 1/0 defaults (so that every term of batch-norm is exercised) and
// NumBatchesTracked 3. It lives on the CPU backend.
func GoldenReference() (*Model, error) {
	m, err := New(Config{Variant: "n", Classes: 80, Seed: 2026})
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(7, 11))
	u := func(lo, hi float64) float32 { return float32(lo + (hi-lo)*r.Float64()) }
	for _, nb := range m.BatchNorms() {
		bn := nb.BN
		for i := range bn.C {
			bn.Weight.Value.Host()[i] = u(0.5, 1.5)
			bn.Bias.Value.Host()[i] = u(-0.2, 0.2)
			bn.RunningMean.Value.Host()[i] = u(-0.1, 0.1)
			bn.RunningVar.Value.Host()[i] = u(0.5, 1.5)
		}
		bn.NumBatchesTracked = 3
	}
	return m, nil
}
