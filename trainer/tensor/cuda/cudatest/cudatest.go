// Package cudatest opens cuda Backends for tests outside package cuda: one
// on the CPU harness (the kernels compiled with g++, see
// cuda.NewHarnessBackend), which every host with a C++ compiler runs, and
// one on GPU 0, which skips elsewhere. Each Backend closes with its test.
package cudatest

import (
	"errors"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// Harness returns a Backend on a fresh CPU harness process, or skips the
// test where the harness cannot be built (no g++, no kernel sources).
func Harness(t testing.TB) *cuda.Backend {
	t.Helper()
	return HarnessWith(t, cuda.HarnessOptions{})
}

// HarnessWith is Harness with launches shaped by o.
func HarnessWith(t testing.TB, o cuda.HarnessOptions) *cuda.Backend {
	t.Helper()
	be, err := cuda.NewHarnessBackend(o)
	if errors.Is(err, cuda.ErrNoHarness) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, be)
	return be
}

// GPU returns a Backend on GPU 0 (FP32 math), or skips the test where
// there is none (no driver, library or device: cuda.ErrUnavailable).
func GPU(t testing.TB) *cuda.Backend {
	t.Helper()
	be, err := cuda.NewBackend(0, cuda.Options{})
	if errors.Is(err, cuda.ErrUnavailable) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closeWith(t, be)
	return be
}

func closeWith(t testing.TB, be *cuda.Backend) {
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
}
