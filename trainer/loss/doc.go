// Package loss computes the YOLO26-seg training loss: the task-aligned
// assigner and the end-to-end (one-to-many + one-to-one) segmentation loss,
// equal to Ultralytics 8.4.2's E2ELoss(v8SegmentationLoss) in float32 on
// CPU. Every term's forward and backward sit side by side; Forward returns
// the loss and writes d(total)/d(output) for every head output, which the
// model's backward pass takes as its upstream gradient.
//
// Semantics a user must know:
//
//   - Inputs are the model's train-mode outputs (Outputs: per-branch raw
//     l,t,r,b distances in grid units, class logits, mask coefficients; the
//     prototypes and semantic logits) and the loader's targets (Targets:
//     xyxy boxes in canvas pixels, classes, boxes_per_image, and the {0,1}
//     mask stack at prototype resolution, i.e. canvas stride 4; other mask
//     sizes are refused). Targets is formats/batch's Instances: a record's
//     instances (batch.InstancesOf) are the loss's targets, without a copy. Instances flagged iscrowd (present only when
//     the loader keeps crowd regions) are left out of the loss, as the
//     reference's loader drops them.
//   - Overlapping masks: the reference trains on an overlap index map that
//     it composes after sorting each image's instances by decreasing mask
//     area, so the smaller instance owns a shared pixel. The loss composes
//     the same map from the loader's whole per-instance masks: it paints
//     each image's instances by decreasing mask area (stable for equal
//     areas), whatever order they are listed in, and both the mask term and
//     the semantic target read that ownership.
//   - Semantic target (8.4.2 rule): each pixel reads its owner's class;
//     background reads the class of the image's last-painted (smallest)
//     instance; every channel is zero where that class is 0. Images without
//     instances have an all-zero target.
//   - Assignment: STAL widens GT sides under 8 px to 16 px for the candidate
//     test only; CIoU is clamped at 0 in the metric; anchors claimed by
//     several GTs go to the largest CIoU over all slots; one-to-one keeps
//     top-7 then the single best anchor per GT. Ties in the top-k go to the
//     lower anchor index (PyTorch's order is unspecified; the reference
//     fixtures have no ties that matter).
//   - Positives are gathered for the whole batch at once into a [B, Pmax]
//     layout padded with the unassigned sentinel -1, which every consumer
//     masks before indexing. Per-image sums are formed first and then added
//     over images, so padding never changes the value.
//   - Mask crop follows the reference's CPU path: with fewer than 50
//     positives in an image the box (in mask pixels) is rounded half to
//     even; otherwise x1 ≤ c < x2 is tested on the fractional box. Boxes
//     are expected on the canvas; parts outside are clamped (the
//     reference would read a negative rounded coordinate as a Python
//     negative index, which no canvas-clipped box produces).
//   - The vector is [box, seg, cls, dfl, semseg] with gains 7.5, 7.5, 0.5,
//     1.5, 7.5, times the batch size; Total = o2m·v_o2m + o2o·v_o2o summed.
//     The ProgLoss weight o2m falls linearly from 0.8 to 0.1 over the run;
//     Criterion.Update must be called once at the end of each epoch.
//   - The one-to-one branch sees prototypes and semantic logits detached:
//     their gradients come from the one-to-many terms only.
//   - Empty boxes (x2 ≤ x1 or y2 ≤ y1) are refused with an error naming the
//     image and instance: they would divide the mask loss by a zero area.
//
// Internal arithmetic is float64 (the CIoU of the assigner is float32, in
// the reference's operation order, because its 6th power magnifies
// rounding); results match the float32 reference within 1e-6 relative.
//
// # On a device
//
// ForwardOn is the loss as one fused, loss-level kernel on a backend's
// memory: it reads the eight head outputs where the model left them and
// the batch's targets where DeviceTargets.Upload put them (boxes as
// float32, classes and boxes_per_image as int32, the iscrowd flags and the
// {0,1} mask stack as the loader's bytes, never widened on the host),
// writes the eight output gradients into backend buffers that the
// backward pass takes as its seeds, and leaves the loss items and the
// total in a result buffer of ResultLen elements that ReadResult brings
// down in one transfer. A training step's crossings for the loss are
// therefore the targets up and a few scalars down.
//
// On the cpu and emu backends (backend.HostKernels) the kernel is
// Forward itself, run through RunHost on views of the backend's memory:
// one definition of the loss, no copy of the outputs on the CPU, nothing
// counted on emu, and results equal to Forward on host slices to the bit
// (the goldens run through both). A device backend implements
// DeviceKernels instead: the loss as seven loss-level kernels (pad the
// targets, compose the owner map and semantic target, and per branch the
// assigner, the class and box terms and the mask term, then the semantic
// term and the combination), which ForwardOn queues after making every
// check Forward makes on the host — sizes from the geometry and the
// buffers, the targets from the copy of their small arrays that
// DeviceTargets.Upload keeps (everything but the masks) — so nothing
// crosses but the result. Its scratch (padded targets, both assignments,
// the owner map, the semantic target, the terms) is allocated on the
// backend once and reused. The device path is checked end to end against
// Forward, bit for bit, through twins written over the emulated device
// with this package's Go functions; the CUDA kernels are checked against
// Forward on the CPU harness (trainer/tensor/cuda). Which path runs is
// the On the device chose when it opened (trainer/device); an On with
// neither kernel takes the host round trip: ForwardOn downloads the
// outputs and targets, runs Forward on the host and uploads the gradients
// and the result, and HostRoundTrips counts those calls.
//
// The loss goes onto a backend as fused, loss-level kernels — this Go code
// as the CPU implementation, a device twin checked against it — rather
// than composed from tensor ops: the assigner (top-k per ground truth,
// argmax over boxes, pairwise CIoU in the reference's float32 order),
// the gathers of positives and the float64 reductions would need a dozen
// new ops whose composition changes rounding, and the goldens in
// ../shared/goldens/loss hold these numbers; one kernel per term keeps
// that reference readable and exact.
package loss
