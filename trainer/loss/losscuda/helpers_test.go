package losscuda

import (
	"math"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// noCrossing runs f and fails the test when anything crossed between the
// host and be meanwhile: the loss's device kernels read and write device
// memory only.
func noCrossing(t *testing.T, be backend.Backend, what string, f func()) {
	t.Helper()
	t0 := be.Transfers()
	f()
	if t1 := be.Transfers(); t1 != t0 {
		t.Errorf("%s crossed on %s: %+v before, %+v after", what, be.Name(), t0, t1)
	}
}

// worst returns the largest |got−want| / (atol + rtol·|want|) and where;
// a value above 1 is a failure. NaN where the reference has none fails.
func worst(got, want []float32, rtol, atol float64) (float64, int) {
	w, at := 0.0, -1
	for i := range want {
		g, r := float64(got[i]), float64(want[i])
		if g == r || math.IsNaN(r) && math.IsNaN(g) {
			continue
		}
		e := math.Abs(g-r) / (atol + rtol*math.Abs(r))
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > w || at < 0 {
			w, at = e, i
		}
	}
	return w, at
}
