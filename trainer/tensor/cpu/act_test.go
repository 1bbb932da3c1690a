package cpu

import (
	"github.com/segpipe/segpipe/internal/cputime"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSigmoidKernelAccuracy compares the vector sigmoid/SiLU against
// float64 math over ordinary values, the clamp region and the tail path.
func TestSigmoidKernelAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	x := []float32{0, -0, 1, -1, 87, -87, 88.5, -88.5, 100, -100, 1e-8, -1e-8, 20, -20, 16.6, -16.6}
	for range 4000 {
		x = append(x, float32(r.NormFloat64()*8))
	}
	x = append(x, 3, -2, 0.5) // a tail shorter than one vector
	for _, silu := range []bool{false, true} {
		y := make([]float32, len(x))
		sigmoidInto(x, y, silu)
		for i, v := range x {
			s := 1 / (1 + math.Exp(-float64(v)))
			if silu {
				s *= float64(v)
			}
			// Relative to the value, with an absolute floor far below what
			// float32 training can notice (tiny tails of the logistic).
			if d := math.Abs(float64(y[i]) - s); d > 4e-7*math.Abs(s)+1e-30 && d > 1e-37 {
				t.Fatalf("silu=%v x=%v: got %v, want %v (rel %g)", silu, v, y[i], s, d/math.Abs(s))
			}
		}
	}
}

func TestSiLUBackwardKernelAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	var x, dy []float32
	for range 1003 {
		x = append(x, float32(r.NormFloat64()*8))
		dy = append(dy, float32(r.NormFloat64()))
	}
	x[0], x[1], x[2] = 95, -95, 0
	dx := make([]float32, len(x))
	for i := range dx {
		dx[i] = 0.5
	}
	siluBackward(x, dy, dx)
	for i, v := range x {
		s := 1 / (1 + math.Exp(-float64(v)))
		want := 0.5 + float64(dy[i])*s*(1+float64(v)*(1-s))
		if d := math.Abs(float64(dx[i]) - want); d > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("x=%v: dx %v, want %v", v, dx[i], want)
		}
	}
}

func BenchmarkSiLU(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 4)
	}
	y := make([]float32, len(x))
	b.Run("kernel", func(b *testing.B) {
		done := cputime.Meter(func(s float64) { b.ReportMetric(s*1e3/float64(b.N), "cpu-ms/op") })
		for b.Loop() {
			sigmoidInto(x, y, true)
		}
		done()
		b.SetBytes(int64(4 * len(x)))
	})
	b.Run("scalar-go", func(b *testing.B) {
		done := cputime.Meter(func(s float64) { b.ReportMetric(s*1e3/float64(b.N), "cpu-ms/op") })
		for b.Loop() {
			sigmoidGo(x, y, true)
		}
		done()
		b.SetBytes(int64(4 * len(x)))
	})
}
