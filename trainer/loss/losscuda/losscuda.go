// Package losscuda runs trainer/loss's device twins (loss.DeviceKernels)
// on the CUDA backend: the loss's kernels, their CUDA C sources
// (kernels/loss_assign.cu, kernels/loss_mask.cu) and PTX, and their Go
// side — argument layouts, buffer checks, launch order — beside the loss
// they twin, as llm.c keeps a layer's kernels with its reference. This
// package declares its two modules with their PTX and kernel names
// (cuda.DeclareModule) and launches them by name (Module.Launch, with
// trainer/internal/cudalaunch's arguments and grids, Addr and Scratch),
// so the backend knows tensors and launches and
// nothing of the loss's kernels or types. The CPU harness compiles the
// declared modules' sources with the backend's own.
//
// trainer/device hands the loss these kernels (loss.OnDevice(be, New(be)))
// when it opens a cuda device.
package losscuda

// The loss's kernels round every operation as the Go reference does:
// loss_assign.cu compiles without multiply-add contraction.
//go:generate bash ../../tensor/cuda/kernels/build-ptx.sh -fmad=false kernels/loss_assign.cu
//go:generate bash ../../tensor/cuda/kernels/build-ptx.sh kernels/loss_mask.cu

import (
	_ "embed"
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

// The loss's kernels, by module: loss_assign.cu's (targets, assignment,
// classification and box terms) and loss_mask.cu's (mask and semantic
// terms).
var (
	assignKernels = []string{"loss_targets", "loss_assign_metric", "loss_assign_topk", "loss_assign_resolve",
		"loss_assign_max", "loss_assign_targets", "loss_assign_count", "loss_cls_rows", "loss_box",
		"loss_clsbox_finish", "loss_combine", "loss_zero_without_fg"}
	maskKernels = []string{"loss_owner_area", "loss_owner_map", "loss_semantic", "loss_mask_gather",
		"loss_mask_rows", "loss_mask_proto_grad", "loss_mask_finish", "loss_sem_channel", "loss_sem_finish"}
)

// The modules' PTX (go generate, nvcc 11.8; CI checks it is current).
var (
	//go:embed kernels/loss_assign.ptx
	assignPTX []byte
	//go:embed kernels/loss_mask.ptx
	maskPTX []byte
)

// The two modules, declared when the package initialises, before any
// device or harness opens.
var (
	assignModule = cuda.DeclareModule("loss_assign", assignPTX, assignKernels...)
	maskModule   = cuda.DeclareModule("loss_mask", maskPTX, maskKernels...)
)

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
