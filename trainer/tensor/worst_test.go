package tensor

import (
	"math"
	"testing"
)

func TestWorst(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		name      string
		got, want []float32
		e         float64
		at        int
	}{
		{"equal", []float32{1, 2, inf}, []float32{1, 2, inf}, 0, -1},
		{"NaN where NaN", []float32{nan}, []float32{nan}, 0, -1},
		{"NaN where a number", []float32{1, nan}, []float32{1, 1}, math.Inf(1), 1},
		{"largest relative", []float32{1.1, 10.5}, []float32{1, 10}, 0.1 / 0.11, 0},
		{"atol dominates near zero", []float32{0.001}, []float32{0}, 0.1, 0},
	} {
		e, at := Worst(c.got, c.want, 0.1, 0.01)
		if math.Abs(e-c.e) > 1e-6*max(1, math.Abs(c.e)) && !(math.IsInf(e, 1) && math.IsInf(c.e, 1)) || at != c.at {
			t.Errorf("%s: Worst %g at %d, want %g at %d", c.name, e, at, c.e, c.at)
		}
		if ok := AllClose(c.got, c.want, 0.1, 0.01); ok != (e <= 1) && c.name != "NaN where NaN" && c.name != "equal" {
			t.Errorf("%s: AllClose %v with Worst %g", c.name, ok, e)
		}
	}
}
