package loss

import "github.com/segpipe/segpipe/trainer/tensor/backend"

// DeviceKernels is what a backend without host kernels implements to run
// ForwardOn on its own memory (the CUDA backend does): the loss then
// reads the head outputs and the targets where they are and nothing but
// the result crosses to the host. Each method is the device twin of one
// step of Forward, with the same formulas, checked against it; every
// buffer is the backend's own. Integer arrays are int32 elements of
// float32 buffers (bits untouched), byte arrays four to an element.
//
// ForwardOn sequences the methods, in this order, for one batch:
// LossTargets; LossOwners; then for each branch (one-to-many, then
// one-to-one) LossAssign, LossClsBox, LossMask; LossSemseg once (with the
// one-to-many gradient scale); LossCombine. The gradient buffers are
// zeroed (Fill) before the first method that adds into them. Methods
// return only what the host knows before launching (bad arguments);
// data-dependent outcomes stay on the device.
type DeviceKernels interface {
	// LossTargets pads the batch's non-crowd instances into per-image
	// slots of width p.M (host-known, see DeviceTargets.Kept): p.Labels,
	// p.Boxes, p.Valid (box coordinates summing above 0, the reference's
	// mask_gt) and p.Src (the instance's index in the uploaded arrays, -1
	// on padding slots), [B, M] each ([B, M, 4] for Boxes), and p.Count
	// [B] (non-crowd instances per image).
	LossTargets(g Geometry, t *DeviceTargets, p *DevicePadded)
	// LossOwners composes the owner map (owner [B, Hp, Wp] int32: 1 + the
	// slot owning the pixel, 0 for background; each image's instances
	// painted by decreasing mask area, stable, so the smaller wins) and
	// the semantic target (sem [B, NC, Hs, Ws] float32, buildSemantic's
	// rule) from the uploaded mask stack through p.Src.
	LossOwners(g Geometry, t *DeviceTargets, p *DevicePadded, owner, sem backend.Buffer)
	// LossAssign is the task-aligned assigner of one branch (cfg) on the
	// branch's raw outputs: boxes [B, 4, A] (l, t, r, b in grid units) and
	// score logits [B, NC, A]. It writes a, whose NumFG and ScoreSum are
	// device scalars.
	LossAssign(g Geometry, cfg AssignerConfig, boxes, scores backend.Buffer, p *DevicePadded, a *DeviceAssignment)
	// LossClsBox is the class BCE, the CIoU box term and the reg_max=1
	// distance term of one branch: it writes the three ungained,
	// un-normalised values (Σ BCE, Σ (1−CIoU)·w, Σ L1/4·w, as float64,
	// two words each, low first) into terms[0:6] and, when boxesG is
	// present, adds scale·gain/S times their gradients into boxesG and
	// scoresG (S = max(ScoreSum, 1); gains from cfg).
	LossClsBox(g Geometry, cfg Config, boxes, scores backend.Buffer, a *DeviceAssignment, scale float64, boxesG, scoresG, terms backend.Buffer)
	// LossMask is the mask term of one branch (maskScratch.loss): its
	// ungained value as a float64 into terms[0:2] and, where present,
	// scale·d/dcoef into coefG and scale·d/dproto into protoG.
	LossMask(g Geometry, a *DeviceAssignment, p *DevicePadded, owner, coef, proto backend.Buffer, scale float64, coefG, protoG, terms backend.Buffer)
	// LossSemseg is the semantic term (semScratch.loss): its ungained
	// value into terms[0:2] and, where present, scale·d/dlogits into
	// grad.
	LossSemseg(g Geometry, logits, sem backend.Buffer, scale float64, grad, terms backend.Buffer)
	// LossCombine forms the result words (ResultLen) from the branches'
	// terms as Forward forms Result.Items and Result.Total: terms holds,
	// per branch, LossClsBox's 6 words, LossMask's 2, then LossSemseg's
	// 2 once at the end (18 words); the assignments give each branch's S.
	LossCombine(g Geometry, cfg Config, o2m, o2o float64, terms backend.Buffer, a [2]*DeviceAssignment, res backend.Buffer)
}

// DevicePadded is the padded, crowd-free targets in a backend's memory
// (LossTargets' output); M is known on the host.
type DevicePadded struct {
	M                                int
	Labels, Boxes, Valid, Src, Count backend.Buffer
}

// DeviceAssignment is one branch's assignment in a backend's memory:
// FG [B, A] int32 (0/1), GTIdx [B, A] int32 (slot; 0 on background),
// Labels [B, A] int32 (the slot's class), Boxes [B, A, 4] float32 (the target box, xyxy pixels), ScoreValue
// [B, A] float32 (0 on background), NumFG one int32 and ScoreSum one
// float64 (two words): Assignment's fields, read only on the device.
type DeviceAssignment struct {
	FG, GTIdx, Labels, Boxes, ScoreValue backend.Buffer
	NumFG, ScoreSum                      backend.Buffer
}
