// Package losscuda runs trainer/loss's device twins (loss.DeviceKernels)
// on the CUDA backend: the Go side of the loss's kernels — argument
// layouts, buffer checks, launch order — beside the loss they twin, as
// llm.c keeps a layer's kernels with its reference. This package names
// its two modules and their kernels (assignKernels, maskKernels), has the
// backend load them (cuda.Backend.Module) and launches them by name
// (Module.Launch, with Addr and Scratch), so the backend knows tensors and
// launches and nothing of the loss's kernels or types. The CUDA C sources
// (loss_assign.cu, loss_mask.cu) and their PTX still sit in
// trainer/tensor/cuda/kernels, where the CPU harness builds every .cu as
// one program and the PTX build and its freshness check run.
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
type Kernels struct {
	be           *cuda.Backend
	assign, mask *cuda.Module
}

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

// New returns the loss kernels on be, its modules loaded.
func New(be *cuda.Backend) Kernels {
	return Kernels{be: be, assign: be.Module("loss_assign", assignKernels...), mask: be.Module("loss_mask", maskKernels...)}
}

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
