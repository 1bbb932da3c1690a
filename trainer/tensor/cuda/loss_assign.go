package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The loss's padded targets, assigner, class and box terms and
// combination on the device (part of trainer/loss's DeviceKernels, the
// kernels of kernels/loss_assign.cu). loss.ForwardOn has checked every
// size before it calls them; a buffer too short for the geometry panics
// here, as every Backend method does on a device error.

// laMaxLevels is LA_MAX_LEVELS in loss_assign.cu.
const laMaxLevels = 8

// encodeLaGeom lays out struct LaGeom: int B, NC, A, M, nlevels; int
// h[8], w[8]; float stride[8]; float img_h, img_w.
func encodeLaGeom(g *loss.Geometry, M int) []byte {
	if len(g.Levels) > laMaxLevels {
		panic(fmt.Sprintf("cuda backend: loss over %d levels, the kernels take at most %d", len(g.Levels), laMaxLevels))
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

// laOneBlock launches a single-block kernel.
func (k *Kernels) laOneBlock(kn kernel, threads int, args ...arg) error {
	block := k.block()
	if threads == 1 {
		block = dim3{1, 1, 1}
	}
	if err := k.l.launch(kn, dim3{1, 1, 1}, block, args); err != nil {
		return fmt.Errorf("%s: %w", kn, err)
	}
	return nil
}

// LossTargets pads the batch's non-crowd instances into p's slots of
// width p.M (loss_targets, one thread per image).
func (be *Backend) LossTargets(g loss.Geometry, t *loss.DeviceTargets, p *loss.DevicePadded) {
	B, M := g.B, p.M
	checkLen("loss targets", B*M, p.Labels, p.Valid, p.Src)
	checkLen("loss targets", 4*B*M, p.Boxes)
	checkLen("loss targets", B, p.Count, t.BoxesPerImage)
	orPanic("loss targets", be.k.run(kLossTargets, B, ptrArg(be.ptr(t.BoxesPerImage)), ptrArg(be.ptr(t.Classes)),
		ptrArg(be.ptr(t.Boxes)), ptrArg(be.ptr(t.IsCrowd)), i32Arg(t.CrowdBytes), i32Arg(B), i32Arg(M),
		ptrArg(be.ptr(p.Labels)), ptrArg(be.ptr(p.Boxes)), ptrArg(be.ptr(p.Valid)), ptrArg(be.ptr(p.Src)), ptrArg(be.ptr(p.Count))))
}

// LossAssign is the task-aligned assigner of one branch: the candidates,
// CIoUs and metrics of every (image, slot, anchor), the top-k per GT, the
// multi-GT resolution, one-to-one's second top-k, the per-GT maxima, the
// targets and the count, in seven launches over the Backend's workspace
// (B·M·A metrics, CIoUs and flags).
func (be *Backend) LossAssign(g loss.Geometry, cfg loss.AssignerConfig, boxes, scores backend.Buffer, p *loss.DevicePadded, a *loss.DeviceAssignment) {
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
		panic(fmt.Sprintf("cuda backend: loss assign: bad assigner config %+v", cfg))
	}
	k := be.k
	geo := structArg(encodeLaGeom(&g, M))
	rows, cells := B*M, B*M*A
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	var maxMet, maxOv, metric, overlaps, flags Ptr
	if cells > 0 {
		ws := be.scratch(16*rows + 8*cells + cells)
		maxMet, maxOv = ws, ws.Add(8*rows)
		metric, overlaps = ws.Add(16*rows), ws.Add(16*rows+4*cells)
		flags = ws.Add(16*rows + 8*cells)
		k2 := 0
		if cfg.TopK2 > 0 && cfg.TopK2 != cfg.TopK {
			k2 = min(cfg.TopK2, A)
		}
		lc := structArg(encodeLaStruct([]int{min(cfg.TopK, A), k2}, []float64{cfg.Alpha, cfg.Beta, cfg.SmallSide, cfg.SmallSideTo}, nil))
		orPanic("loss assign metric", k.run(kLossAssignMetric, cells, geo, lc, ptrArg(be.ptr(boxes)), ptrArg(be.ptr(scores)),
			ptrArg(be.ptr(p.Labels)), ptrArg(be.ptr(p.Boxes)), ptrArg(be.ptr(p.Valid)), ptrArg(metric), ptrArg(overlaps),
			ptrArg(flags), i64Arg(cells)))
		topk := func(kk, stage int) {
			orPanic("loss assign top-k", k.perChannel(kLossAssignTopK, rows, ptrArg(metric), ptrArg(flags),
				ptrArg(be.ptr(p.Valid)), i32Arg(A), i32Arg(kk), i32Arg(stage), i64Arg(rows)))
		}
		topk(min(cfg.TopK, A), 0)
		orPanic("loss assign resolve", k.run(kLossAssignResolve, B*A, ptrArg(overlaps), ptrArg(flags), i32Arg(M), i32Arg(A), i64Arg(B*A)))
		if k2 > 0 {
			topk(k2, 1)
		}
		orPanic("loss assign maxima", k.perChannel(kLossAssignMax, rows, ptrArg(metric), ptrArg(overlaps), ptrArg(flags),
			i32Arg(A), ptrArg(maxMet), ptrArg(maxOv), i64Arg(rows)))
	}
	orPanic("loss assign targets", k.run(kLossAssignTargets, B*A, ptrArg(flags), ptrArg(metric), ptrArg(maxMet), ptrArg(maxOv),
		ptrArg(be.ptr(p.Labels)), ptrArg(be.ptr(p.Boxes)), i32Arg(M), i32Arg(A), ptrArg(be.ptr(a.FG)), ptrArg(be.ptr(a.GTIdx)),
		ptrArg(be.ptr(a.Labels)), ptrArg(be.ptr(a.Boxes)), ptrArg(be.ptr(a.ScoreValue)), i64Arg(B*A)))
	orPanic("loss assign count", k.laOneBlock(kLossAssignCount, 0, ptrArg(be.ptr(a.FG)), ptrArg(be.ptr(a.ScoreValue)),
		ptrArg(be.ptr(a.NumFG)), ptrArg(be.ptr(a.ScoreSum)), i64Arg(B*A)))
}

// LossClsBox is one branch's class BCE, CIoU box term and distance term
// (loss_cls_rows, one block per image and class; loss_box over the
// anchors; loss_clsbox_finish): the three sums into terms[0:6] as
// float64 words and, with boxesG present, scale·gain/S times their
// gradients added into boxesG and scoresG.
func (be *Backend) LossClsBox(g loss.Geometry, cfg loss.Config, boxes, scores backend.Buffer, a *loss.DeviceAssignment, scale float64, boxesG, scoresG, terms backend.Buffer) {
	B, A, NC := g.B, g.Anchors(), g.NC
	checkLen("loss cls/box", B*4*A, boxes)
	checkLen("loss cls/box", B*NC*A, scores)
	checkLen("loss cls/box", B*A, a.FG, a.Labels, a.ScoreValue)
	checkLen("loss cls/box", 4*B*A, a.Boxes)
	checkLen("loss cls/box", 2, a.ScoreSum)
	checkLen("loss cls/box", 6, terms)
	if boxesG.Present() != scoresG.Present() {
		panic("cuda backend: loss cls/box: pass both gradient buffers or neither")
	}
	if boxesG.Present() {
		checkLen("loss cls/box", B*4*A, boxesG)
		checkLen("loss cls/box", B*NC*A, scoresG)
	}
	k := be.k
	rows, n := B*NC, B*A
	blocks := 0
	if n > 0 {
		blocks = int(k.grid1(n).x)
	}
	geo := structArg(encodeLaGeom(&g, 0))
	gains := structArg(encodeLaStruct(nil, []float64{scale * cfg.ClsGain, scale * cfg.BoxGain, scale * cfg.DFLGain}, nil))
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	ws := be.scratch(8*rows + 16*blocks)
	rowPart, boxPart := ws, ws.Add(8*rows)
	orPanic("loss cls", k.perChannel(kLossClsRows, rows, geo, gains, ptrArg(be.ptr(scores)), ptrArg(be.ptr(a.FG)),
		ptrArg(be.ptr(a.Labels)), ptrArg(be.ptr(a.ScoreValue)), ptrArg(be.ptr(a.ScoreSum)), ptrArg(be.ptr(scoresG)),
		ptrArg(rowPart), i64Arg(rows)))
	orPanic("loss box", k.run(kLossBox, n, geo, gains, ptrArg(be.ptr(boxes)), ptrArg(be.ptr(a.FG)), ptrArg(be.ptr(a.Boxes)),
		ptrArg(be.ptr(a.ScoreValue)), ptrArg(be.ptr(a.ScoreSum)), ptrArg(be.ptr(boxesG)), ptrArg(boxPart), i64Arg(n)))
	orPanic("loss cls/box sums", k.laOneBlock(kLossClsBoxFinish, 0, ptrArg(rowPart), i32Arg(rows), ptrArg(boxPart), i32Arg(blocks),
		ptrArg(be.ptr(terms))))
}

// LossCombine forms the result words from the 18 terms words and both
// assignments (loss_combine, one thread) and, with semG present, zeroes
// it when the one-to-many branch has no positive.
func (be *Backend) LossCombine(g loss.Geometry, cfg loss.Config, o2m, o2o float64, terms backend.Buffer, a [2]*loss.DeviceAssignment, semG, res backend.Buffer) {
	checkLen("loss combine", 18, terms)
	checkLen("loss combine", loss.ResultLen, res)
	for _, x := range a {
		checkLen("loss combine", 1, x.NumFG)
		checkLen("loss combine", 2, x.ScoreSum)
	}
	c := structArg(encodeLaStruct(nil, []float64{cfg.BoxGain, cfg.ClsGain, cfg.DFLGain, o2m, o2o}, []int{g.B}))
	orPanic("loss combine", be.k.laOneBlock(kLossCombine, 1, c, ptrArg(be.ptr(terms)), ptrArg(be.ptr(a[0].NumFG)),
		ptrArg(be.ptr(a[0].ScoreSum)), ptrArg(be.ptr(a[1].NumFG)), ptrArg(be.ptr(a[1].ScoreSum)), ptrArg(be.ptr(res))))
	if semG.Present() {
		orPanic("loss combine", be.k.run(kLossZeroWithoutFG, semG.Len, ptrArg(be.ptr(a[0].NumFG)), ptrArg(be.ptr(semG)), i64Arg(semG.Len)))
	}
}
