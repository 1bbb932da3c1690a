package losscuda

import (
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
