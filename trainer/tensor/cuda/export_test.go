package cuda

import "testing"

// NewHarnessBackendForTest is newHarnessBackend for this directory's
// external tests (package cuda_test), which may import what imports
// this package (trainer/train).
func NewHarnessBackendForTest(t *testing.T) *Backend {
	be, _ := newHarnessBackend(t)
	return be
}
