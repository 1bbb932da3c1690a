package cuda

import "testing"

// newHarnessBackend starts a harness process and returns a Backend on it
// and its engine (or skips the test where the harness cannot be built).
// The process ends with the test.
func newHarnessBackend(t *testing.T) (*Backend, *harnessEngine) {
	t.Helper()
	be, e, err := newHarness(HarnessOptions{})
	skipWithoutHarness(t, err)
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	return be, e
}
