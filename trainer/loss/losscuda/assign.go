package losscuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/internal/cudalaunch"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The loss's padded targets, assigner, class and box terms and
// combination on the device (part of loss.DeviceKernels, the kernels of
// kernels/loss_assign.cu). loss.ForwardOn has checked
// every size before it calls them; a buffer too short for the geometry
// panics here, as a Backend method does on a device error.

// laMaxLevels is LA_MAX_LEVELS in loss_assign.cu.
const laMaxLevels = 8

// encodeLaGeom lays out struct LaGeom: int B, NC, A, M, nlevels; int
// h[8], w[8]; float stride[8]; float img_h, img_w.
func encodeLaGeom(g *loss.Geometry, M int) []byte {
	if len(g.Levels) > laMaxLevels {
		panic(fmt.Sprintf("losscuda: loss over %d levels, the kernels take at most %d", len(g.Levels), laMaxLevels))
	}
	b := make([]byte, 4*(5+3*laMaxLevels+2))
	put := func(i int, v uint32) { binary.LittleEndian.PutUint32(b[4*i:], v) }
	for i, v := range []int{g.B, g.NC, g.Anchors(), M, len(g.Levels)} {
		put(i, uint32(v))
	}
	for i, l := range g.Levels {
		put(5+i, uint32(l.H))
		put(5+laMaxLevels+i, uint32(l.W))
		put(5+2*laMaxLevels+i, math.Float32bits(l.Stride))
	}
	h, w := g.ImageSize()
	put(5+3*laMaxLevels, math.Float32bits(h))
	put(6+3*laMaxLevels, math.Float32bits(w))
	return b
}

// encodeLaStruct lays out a struct of leading ints (padded to 8 bytes)
// and then doubles, or of doubles and then trailing ints (padded).
func encodeLaStruct(lead []int, ds []float64, trail []int) []byte {
	var b []byte
	for _, v := range lead {
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(v)))
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	for _, d := range ds {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d))
	}
	for _, v := range trail {
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(v)))
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// LossTargets pads the batch's non-crowd instances into p's slots of
// width p.M (loss_targets, one thread per image).
func (k Kernels) LossTargets(g loss.Geometry, t *loss.DeviceTargets, p *loss.DevicePadded) {
	be := k.be
	B, M := g.B, p.M
	checkLen("loss targets", B*M, p.Labels, p.Valid, p.Src)
	checkLen("loss targets", 4*B*M, p.Boxes)
	checkLen("loss targets", B, p.Count, t.BoxesPerImage)
	orPanic("loss targets", assignModule.Launch(be, "loss_targets", cudalaunch.Elements(B), cudalaunch.PtrArg(be.Addr(t.BoxesPerImage)), cudalaunch.PtrArg(be.Addr(t.Classes)),
		cudalaunch.PtrArg(be.Addr(t.Boxes)), cudalaunch.PtrArg(be.Addr(t.IsCrowd)), cudalaunch.Int32Arg(t.CrowdBytes), cudalaunch.Int32Arg(B), cudalaunch.Int32Arg(M),
		cudalaunch.PtrArg(be.Addr(p.Labels)), cudalaunch.PtrArg(be.Addr(p.Boxes)), cudalaunch.PtrArg(be.Addr(p.Valid)), cudalaunch.PtrArg(be.Addr(p.Src)), cudalaunch.PtrArg(be.Addr(p.Count))))
}

// LossAssign is the task-aligned assigner of one branch: the candidates,
// CIoUs and metrics of every (image, slot, anchor), the top-k per GT, the
// multi-GT resolution, one-to-one's second top-k, the per-GT maxima, the
// targets and the count, in seven launches over the Backend's workspace
// (B·M·A metrics, CIoUs and flags).
func (k Kernels) LossAssign(g loss.Geometry, cfg loss.AssignerConfig, boxes, scores backend.Buffer, p *loss.DevicePadded, a *loss.DeviceAssignment) {
	be := k.be
	B, A, M := g.B, g.Anchors(), p.M
	checkLen("loss assign", B*4*A, boxes)
	checkLen("loss assign", B*g.NC*A, scores)
	checkLen("loss assign", B*M, p.Labels, p.Valid)
	checkLen("loss assign", 4*B*M, p.Boxes)
	checkLen("loss assign", B*A, a.FG, a.GTIdx, a.Labels, a.ScoreValue)
	checkLen("loss assign", 4*B*A, a.Boxes)
	checkLen("loss assign", 1, a.NumFG)
	checkLen("loss assign", 2, a.ScoreSum)
	if cfg.TopK < 1 || cfg.TopK2 < 0 {
		panic(fmt.Sprintf("losscuda: loss assign: bad assigner config %+v", cfg))
	}
	geo := cudalaunch.StructArg(encodeLaGeom(&g, M))
	rows, cells := B*M, B*M*A
	var maxMet, maxOv, metric, overlaps, flags cudalaunch.Ptr
	if cells > 0 {
		ws, release := be.Scratch(16*rows + 8*cells + cells)
		defer release() // the targets' launch below reads the workspace too
		maxMet, maxOv = ws, ws.Add(8*rows)
		metric, overlaps = ws.Add(16*rows), ws.Add(16*rows+4*cells)
		flags = ws.Add(16*rows + 8*cells)
		k2 := 0
		if cfg.TopK2 > 0 && cfg.TopK2 != cfg.TopK {
			k2 = min(cfg.TopK2, A)
		}
		lc := cudalaunch.StructArg(encodeLaStruct([]int{min(cfg.TopK, A), k2}, []float64{cfg.Alpha, cfg.Beta, cfg.SmallSide, cfg.SmallSideTo}, nil))
		orPanic("loss assign metric", assignModule.Launch(be, "loss_assign_metric", cudalaunch.Elements(cells), geo, lc, cudalaunch.PtrArg(be.Addr(boxes)), cudalaunch.PtrArg(be.Addr(scores)),
			cudalaunch.PtrArg(be.Addr(p.Labels)), cudalaunch.PtrArg(be.Addr(p.Boxes)), cudalaunch.PtrArg(be.Addr(p.Valid)), cudalaunch.PtrArg(metric), cudalaunch.PtrArg(overlaps),
			cudalaunch.PtrArg(flags), cudalaunch.Int64Arg(cells)))
		topk := func(kk, stage int) {
			orPanic("loss assign top-k", assignModule.Launch(be, "loss_assign_topk", cudalaunch.Blocks(rows), cudalaunch.PtrArg(metric), cudalaunch.PtrArg(flags),
				cudalaunch.PtrArg(be.Addr(p.Valid)), cudalaunch.Int32Arg(A), cudalaunch.Int32Arg(kk), cudalaunch.Int32Arg(stage), cudalaunch.Int64Arg(rows)))
		}
		topk(min(cfg.TopK, A), 0)
		orPanic("loss assign resolve", assignModule.Launch(be, "loss_assign_resolve", cudalaunch.Elements(B*A), cudalaunch.PtrArg(overlaps), cudalaunch.PtrArg(flags), cudalaunch.Int32Arg(M), cudalaunch.Int32Arg(A), cudalaunch.Int64Arg(B*A)))
		if k2 > 0 {
			topk(k2, 1)
		}
		orPanic("loss assign maxima", assignModule.Launch(be, "loss_assign_max", cudalaunch.Blocks(rows), cudalaunch.PtrArg(metric), cudalaunch.PtrArg(overlaps), cudalaunch.PtrArg(flags),
			cudalaunch.Int32Arg(A), cudalaunch.PtrArg(maxMet), cudalaunch.PtrArg(maxOv), cudalaunch.Int64Arg(rows)))
	}
	orPanic("loss assign targets", assignModule.Launch(be, "loss_assign_targets", cudalaunch.Elements(B*A), cudalaunch.PtrArg(flags), cudalaunch.PtrArg(metric), cudalaunch.PtrArg(maxMet), cudalaunch.PtrArg(maxOv),
		cudalaunch.PtrArg(be.Addr(p.Labels)), cudalaunch.PtrArg(be.Addr(p.Boxes)), cudalaunch.Int32Arg(M), cudalaunch.Int32Arg(A), cudalaunch.PtrArg(be.Addr(a.FG)), cudalaunch.PtrArg(be.Addr(a.GTIdx)),
		cudalaunch.PtrArg(be.Addr(a.Labels)), cudalaunch.PtrArg(be.Addr(a.Boxes)), cudalaunch.PtrArg(be.Addr(a.ScoreValue)), cudalaunch.Int64Arg(B*A)))
	orPanic("loss assign count", assignModule.Launch(be, "loss_assign_count", cudalaunch.OneBlock(), cudalaunch.PtrArg(be.Addr(a.FG)), cudalaunch.PtrArg(be.Addr(a.ScoreValue)),
		cudalaunch.PtrArg(be.Addr(a.NumFG)), cudalaunch.PtrArg(be.Addr(a.ScoreSum)), cudalaunch.Int64Arg(B*A)))
}

// LossClsBox is one branch's class BCE, CIoU box term and distance term
// (loss_cls_rows, one block per image and class; loss_box over the
// anchors; loss_clsbox_finish): the three sums into terms[0:6] as
// float64 words and, with boxesG present, scale·gain/S times their
// gradients added into boxesG and scoresG.
func (k Kernels) LossClsBox(g loss.Geometry, cfg loss.Config, boxes, scores backend.Buffer, a *loss.DeviceAssignment, scale float64, boxesG, scoresG, terms backend.Buffer) {
	be := k.be
	B, A, NC := g.B, g.Anchors(), g.NC
	checkLen("loss cls/box", B*4*A, boxes)
	checkLen("loss cls/box", B*NC*A, scores)
	checkLen("loss cls/box", B*A, a.FG, a.Labels, a.ScoreValue)
	checkLen("loss cls/box", 4*B*A, a.Boxes)
	checkLen("loss cls/box", 2, a.ScoreSum)
	checkLen("loss cls/box", 6, terms)
	if boxesG.Present() != scoresG.Present() {
		panic("losscuda: loss cls/box: pass both gradient buffers or neither")
	}
	if boxesG.Present() {
		checkLen("loss cls/box", B*4*A, boxesG)
		checkLen("loss cls/box", B*NC*A, scoresG)
	}
	rows, n := B*NC, B*A
	blocks := 0
	if n > 0 {
		blocks = be.ElementBlocks(n)
	}
	geo := cudalaunch.StructArg(encodeLaGeom(&g, 0))
	gains := cudalaunch.StructArg(encodeLaStruct(nil, []float64{scale * cfg.ClsGain, scale * cfg.BoxGain, scale * cfg.DFLGain}, nil))
	ws, release := be.Scratch(8*rows + 16*blocks)
	defer release()
	rowPart, boxPart := ws, ws.Add(8*rows)
	orPanic("loss cls", assignModule.Launch(be, "loss_cls_rows", cudalaunch.Blocks(rows), geo, gains, cudalaunch.PtrArg(be.Addr(scores)), cudalaunch.PtrArg(be.Addr(a.FG)),
		cudalaunch.PtrArg(be.Addr(a.Labels)), cudalaunch.PtrArg(be.Addr(a.ScoreValue)), cudalaunch.PtrArg(be.Addr(a.ScoreSum)), cudalaunch.PtrArg(be.Addr(scoresG)),
		cudalaunch.PtrArg(rowPart), cudalaunch.Int64Arg(rows)))
	orPanic("loss box", assignModule.Launch(be, "loss_box", cudalaunch.Elements(n), geo, gains, cudalaunch.PtrArg(be.Addr(boxes)), cudalaunch.PtrArg(be.Addr(a.FG)), cudalaunch.PtrArg(be.Addr(a.Boxes)),
		cudalaunch.PtrArg(be.Addr(a.ScoreValue)), cudalaunch.PtrArg(be.Addr(a.ScoreSum)), cudalaunch.PtrArg(be.Addr(boxesG)), cudalaunch.PtrArg(boxPart), cudalaunch.Int64Arg(n)))
	orPanic("loss cls/box sums", assignModule.Launch(be, "loss_clsbox_finish", cudalaunch.OneBlock(), cudalaunch.PtrArg(rowPart), cudalaunch.Int32Arg(rows), cudalaunch.PtrArg(boxPart), cudalaunch.Int32Arg(blocks),
		cudalaunch.PtrArg(be.Addr(terms))))
}

// LossCombine forms the result words from the 18 terms words and both
// assignments (loss_combine, one thread) and, with semG present, zeroes
// it when the one-to-many branch has no positive.
func (k Kernels) LossCombine(g loss.Geometry, cfg loss.Config, o2m, o2o float64, terms backend.Buffer, a [2]*loss.DeviceAssignment, semG, res backend.Buffer) {
	be := k.be
	checkLen("loss combine", 18, terms)
	checkLen("loss combine", loss.ResultLen, res)
	for _, x := range a {
		checkLen("loss combine", 1, x.NumFG)
		checkLen("loss combine", 2, x.ScoreSum)
	}
	c := cudalaunch.StructArg(encodeLaStruct(nil, []float64{cfg.BoxGain, cfg.ClsGain, cfg.DFLGain, o2m, o2o}, []int{g.B}))
	orPanic("loss combine", assignModule.Launch(be, "loss_combine", cudalaunch.OneThread(), c, cudalaunch.PtrArg(be.Addr(terms)), cudalaunch.PtrArg(be.Addr(a[0].NumFG)),
		cudalaunch.PtrArg(be.Addr(a[0].ScoreSum)), cudalaunch.PtrArg(be.Addr(a[1].NumFG)), cudalaunch.PtrArg(be.Addr(a[1].ScoreSum)), cudalaunch.PtrArg(be.Addr(res))))
	if semG.Present() {
		orPanic("loss combine", assignModule.Launch(be, "loss_zero_without_fg", cudalaunch.Elements(semG.Len), cudalaunch.PtrArg(be.Addr(a[0].NumFG)), cudalaunch.PtrArg(be.Addr(semG)), cudalaunch.Int64Arg(semG.Len)))
	}
}
