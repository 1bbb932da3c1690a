// Package losscuda runs trainer/loss's device twins (loss.DeviceKernels)
// on the CUDA backend: the Go side of the loss's kernels — argument
// layouts, buffer checks, launch order — beside the loss they twin, as
// llm.c keeps a layer's kernels with its reference. The CUDA C sources
// (loss_assign.cu, loss_mask.cu) are compiled into trainer/tensor/cuda's
// embedded PTX with the other kernels, because its CPU harness builds
// every .cu as one program and its PTX build and freshness check cover
// that folder; this package launches them by name through the backend's
// launch API (cuda.Backend.Launch, Addr, Scratch), so the backend knows
// tensors and launches and nothing of the loss's types.
//
// trainer/device hands the loss these kernels (loss.OnDevice(be, New(be)))
// when it opens a cuda device; nothing registers itself.
package losscuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// Kernels is loss.DeviceKernels on one cuda Backend. Its methods queue
// their kernels on the Backend's compute stream and return; like the
// Backend's own methods they panic on a buffer too short for the geometry
// (loss.ForwardOn has refused bad input on the host before the first
// launch) and on a device error.
type Kernels struct{ be *cuda.Backend }

var _ loss.DeviceKernels = Kernels{}

// New returns the loss kernels on be.
func New(be *cuda.Backend) Kernels { return Kernels{be: be} }

// orPanic turns a launch error into the panic of a failed device call.
func orPanic(op string, err error) {
	if err != nil {
		panic(fmt.Errorf("losscuda: %s: %w", op, err))
	}
}

// checkLen panics unless every buffer holds n elements.
func checkLen(op string, n int, bufs ...backend.Buffer) {
	for _, b := range bufs {
		if b.Len < n {
			panic(fmt.Sprintf("losscuda: %s over %d elements given a buffer of %d", op, n, b.Len))
		}
	}
}
