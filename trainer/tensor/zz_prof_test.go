package tensor_test

import (
	"testing"
	"math/rand/v2"

	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
)

func BenchmarkZZModelN(b *testing.B) {
	m, err := model.New(model.Config{Variant: "n", Seed: 1})
	if err != nil { b.Fatal(err) }
	r := rand.New(rand.NewPCG(1, 2))
	x := tensor.Rand(r, 0, 1, 2, 3, 320, 320)
	for b.Loop() {
		tp := tensor.NewTape(nil)
		out, err := m.Forward(tp, x, model.Train)
		if err != nil { b.Fatal(err) }
		l := tp.Add(tp.Add(tp.Mean(out.One2Many.Scores), tp.Mean(out.Proto)), tp.Mean(out.One2One.Boxes))
		if err := tp.Backward(l); err != nil { b.Fatal(err) }
	}
}
