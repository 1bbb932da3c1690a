// Package tensor provides segpipe's float32 tensors, the primitive ops of
// the YOLO26-seg trainer with their gradients, and reverse-mode autodiff.
//
// # Tensors
//
// A Tensor is a contiguous row-major float32 array (images are NCHW) with a
// shape, its data, and a lazily allocated gradient of the same length, both
// in a backend's memory: opaque buffers (backend.Buffer), never Go slices
// into device memory. The host reaches them only through explicit
// crossings — Upload/FromHost up, ToHost/Item down — or through Host, a
// view the CPU backend serves without a copy and every other backend
// refuses (HostView picks the view where there is one and a copy
// otherwise). Parameters are tensors with RequiresGrad set (see Param).
//
// A tensor's backend is where it was made, and every constructor takes
// it: this package defines tensors and the tape above the backends and
// imports none of them (package cpu, the reference, is chosen by the
// caller: trainer/device, a model's initial weights, a test). An op runs on its tape's
// backend, or for a nil tape on its first input's, so a no-grad pass over
// a model on the emulated device stays there. Mixing backends in one op
// panics.
//
// # Ops and the tape
//
// Every op is a method on *Tape and runs entirely as kernels of the tape's
// backend.Backend (package cpu is the reference): no element of a tensor
// is touched by host code in this package. Layout ops (Permute, Concat,
// Split, the sums' broadcasts) are one strided Copy kernel; Scale and
// gradient accumulation are Axpby. Ops that no production code needs
// (clamps, scalar adds, BCE, index selection) are test helpers, not API:
// the loss computes its own gradients (package loss). Each op's forward
// and backward live side by side in one function: the forward computes the
// output, and when the op is recorded a closure that holds exactly the
// values the backward needs is pushed on the tape.
//
// An op is recorded when the tape records (NewTape) and at least one input
// requires grad; its output then requires grad too. A nil *Tape, or one
// from NoGrad, records nothing (no_grad inference): no closure, so no
// intermediate outlives its last use. Detach cuts a tensor out of the graph.
//
// BackwardFrom seeds output gradients (several outputs at once) and walks
// the tape in reverse; Backward is the scalar-loss shorthand. Gradients
// accumulate into the gradients of leaves (parameters, inputs: tensors no
// recorded op produced) and are never cleared by the package: call ZeroGrad
// between steps. As in PyTorch, intermediates do not keep a gradient: each
// intermediate gradient buffer is recycled once the op that produced the
// tensor has consumed it. Backward resets the tape, releasing the graph.
//
// Op outputs are drawn from the backend's pools (Alloc/Free). A training loop that calls
// RecycleOutputs(keep...) before a backward pass returns every other op
// output of that step to the pools afterwards (see RecycleOutputs for what
// must no longer be touched); without it the GC reclaims them. Ops that
// write every element of their result take a pooled buffer as it is
// instead of clearing it first; the segpipe_poison build tag fills such
// buffers with NaN, so that `go test -tags segpipe_poison ./trainer/...`
// (run in CI) fails for an op that relied on zeros it was not given.
//
// # Semantics a caller must know
//
//   - Shape mismatches in an op are programming errors and panic with the
//     shapes involved; data-driven checks (checkpoints, batches) belong to
//     the callers, which return errors.
//   - Reshape shares data with its input; every other op returns fresh
//     memory, so mutating an op's output never changes its input.
//   - Binary ops broadcast numpy-style; gradients of stretched operands are
//     summed back to their shape.
//   - BatchNorm2d in training mode updates the running statistics in place
//     (unbiased variance, PyTorch momentum convention) even when the tape
//     does not record; in eval mode it uses them.
//   - MaxPool2d ties and Maximum/Minimum ties follow PyTorch: the first
//     maximum in a window wins; equal operands share the gradient equally.
//   - A tensor is not safe for concurrent mutation, and one Tape must not be
//     used from several goroutines at once; kernels parallelise internally.
//   - Results are bitwise reproducible for a given CPU and GOMAXPROCS: every
//     parallel reduction has a fixed split and order. Another CPU (AVX2 vs
//     AVX-512 vs portable kernels) or worker count may differ in rounding.
package tensor
