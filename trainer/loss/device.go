package loss

import (
	"errors"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// DeviceKernels is what runs ForwardOn on the memory of a backend without
// host kernels (trainer/loss/losscuda's for the CUDA backend, handed to
// the loss in an On when the device opens): the loss then
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
// zeroed (Fill) before the first method that adds into them, and so are
// the 18 words of terms. A batch without any instance (M = 0, known on
// the host) has no positive: LossOwners, LossMask and LossSemseg are not
// called and their words stay 0. A branch's scale is its ProgLoss weight
// times B; LossMask and LossSemseg, which take no Config, receive it
// times cfg.BoxGain (maskScratch.loss's and semScratch.loss's scale).
// ForwardOn has checked every size and the targets (Forward's checks)
// before the first launch; the methods panic on what it would have
// refused. Data-dependent outcomes (the positives, S) stay on the device.
type DeviceKernels interface {
	// LossTargets pads the batch's non-crowd instances into per-image
	// slots of width p.M (host-known, the maximum of DeviceTargets.Kept),
	// in their order in the batch: p.Labels,
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
	// 2 once at the end (18 words); the assignments give each branch's S
	// and NumFG (a branch without positives has only its class term, as
	// Forward's). semG, when present, is the semantic logits' gradient,
	// zeroed where the one-to-many branch has no positive: Forward sends
	// the semantic term no gradient then, and only the device knows.
	LossCombine(g Geometry, cfg Config, o2m, o2o float64, terms backend.Buffer, a [2]*DeviceAssignment, semG, res backend.Buffer)
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

// On is where ForwardOn runs: a backend and the loss's kernels on its
// memory, chosen once when the device opens (trainer/device's Loss).
// Host, a backend that runs Go kernels on its own memory (cpu, emu), runs
// Forward itself; Device, the loss's device twins (trainer/loss/losscuda
// for cuda), run it where the outputs are. Neither is the counted host
// round trip.
type On struct {
	Backend backend.Backend
	Host    backend.HostKernels
	Device  DeviceKernels
}

// OnHost is the On of a backend whose kernels run on host memory.
func OnHost(be backend.HostBackend) On { return On{Backend: be, Host: be} }

// OnDevice is the On of a backend with the loss's device twins dk.
func OnDevice(be backend.Backend, dk DeviceKernels) On { return On{Backend: be, Device: dk} }

// Words of the terms buffer: per branch LossClsBox's 6 and LossMask's 2,
// then LossSemseg's 2.
const (
	termsClsBox = 6
	termsBranch = termsClsBox + 2
	termsLen    = 2*termsBranch + 2
)

// twinScratch is ForwardOn's device scratch for a twin: allocated on the
// backend once and reused while large enough.
type twinScratch struct {
	be    backend.Backend
	alloc [22]backend.Buffer // whole allocations behind the views below
	p     DevicePadded
	a     [2]DeviceAssignment
	// owner is the owner map, sem the semantic target, terms the 18 words
	// the kernels write their sums into.
	owner, sem, terms backend.Buffer
}

// buffer returns n elements of allocation i, reallocated when short.
func (s *twinScratch) buffer(i, n int) backend.Buffer { return reuse(s.be, &s.alloc[i], n) }

// size lays out the scratch for a batch of geometry g with slot width M.
func (s *twinScratch) size(be backend.Backend, g *Geometry, M int) {
	if s.be != nil && s.be != be {
		freeAll(s.be, s.alloc[:])
	}
	s.be = be
	B, A := g.B, g.Anchors()
	s.p = DevicePadded{M: M, Labels: s.buffer(0, B*M), Boxes: s.buffer(1, 4*B*M), Valid: s.buffer(2, B*M),
		Src: s.buffer(3, B*M), Count: s.buffer(4, B)}
	for i := range s.a {
		k := 5 + 7*i
		s.a[i] = DeviceAssignment{FG: s.buffer(k, B*A), GTIdx: s.buffer(k+1, B*A), Labels: s.buffer(k+2, B*A),
			Boxes: s.buffer(k+3, 4*B*A), ScoreValue: s.buffer(k+4, B*A), NumFG: s.buffer(k+5, 1), ScoreSum: s.buffer(k+6, 2)}
	}
	s.owner = s.buffer(19, B*g.ProtoH*g.ProtoW)
	s.sem = s.buffer(20, B*g.NC*g.SemH*g.SemW)
	s.terms = s.buffer(21, termsLen)
}

// forwardTwin is ForwardOn on a backend's device twins: every check
// Forward makes, on the host from buffer sizes and Upload's record, then
// the seven kernels queued in device.go's order. Nothing crosses.
func (c *Criterion) forwardTwin(be backend.Backend, dk DeviceKernels, g Geometry, out, grads [NumOutputs]backend.Buffer, t *DeviceTargets, res backend.Buffer, withGrads bool) error {
	var n [NumOutputs]int
	for i, b := range out {
		n[i] = b.Len
	}
	if err := checkOutputLens(&g, n); err != nil {
		return err
	}
	if !t.recorded {
		return errors.New("loss: device targets not filled by DeviceTargets.Upload: the loss's device kernels check the batch on the host from the record Upload keeps")
	}
	if err := checkTargetsSized(&t.host, &g, t.MaskBytes); err != nil {
		return err
	}
	if h := &t.host; t.BoxesPerImage.Len != len(h.BoxesPerImage) || t.Classes.Len != len(h.Classes) ||
		t.Boxes.Len != len(h.Boxes) || t.CrowdBytes != len(h.IsCrowd) {
		return errors.New("loss: device targets changed since DeviceTargets.Upload")
	}
	if withGrads {
		for i, b := range grads {
			if b.Len != out[i].Len {
				return errGradShapes
			}
		}
	}
	M := 0
	for _, k := range t.Kept {
		M = max(M, k)
	}
	s := &c.twin
	s.size(be, &g, M)
	c.last = [2]*Assignment{}
	if withGrads {
		for _, b := range grads {
			be.Fill(b, 0)
		}
	}
	be.Fill(s.terms, 0)
	dk.LossTargets(g, t, &s.p)
	// Without any instance there is no positive: the mask and semantic
	// terms are not formed (Forward returns before them), and their words
	// stay 0.
	if M > 0 {
		dk.LossOwners(g, t, &s.p, s.owner, s.sem)
	}
	cfgs := [2]AssignerConfig{c.cfg.One2Many, c.cfg.One2One}
	for i, w := range [2]float64{c.o2m, c.o2o} {
		scale := w * float64(g.B)
		boxes, scores, coef := out[3*i], out[3*i+1], out[3*i+2]
		var boxesG, scoresG, coefG, protoG backend.Buffer
		if withGrads {
			boxesG, scoresG, coefG = grads[3*i], grads[3*i+1], grads[3*i+2]
			if i == 0 {
				protoG = grads[6] // detached in one2one
			}
		}
		a := &s.a[i]
		terms := s.terms.Slice(termsBranch*i, termsBranch*(i+1))
		dk.LossAssign(g, cfgs[i], boxes, scores, &s.p, a)
		dk.LossClsBox(g, c.cfg, boxes, scores, a, scale, boxesG, scoresG, terms.Slice(0, termsClsBox))
		if M > 0 {
			dk.LossMask(g, a, &s.p, s.owner, coef, out[6], scale*c.cfg.BoxGain, coefG, protoG, terms.Slice(termsClsBox, termsBranch))
		}
	}
	var semG backend.Buffer
	if withGrads {
		semG = grads[7]
	}
	if M > 0 {
		dk.LossSemseg(g, out[7], s.sem, c.o2m*float64(g.B)*c.cfg.BoxGain, semG, s.terms.Slice(2*termsBranch, termsLen))
	}
	dk.LossCombine(g, c.cfg, c.o2m, c.o2o, s.terms, [2]*DeviceAssignment{&s.a[0], &s.a[1]}, semG, res.Slice(0, ResultLen))
	return nil
}
