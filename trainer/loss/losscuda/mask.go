package losscuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/internal/cudalaunch"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The mask side of loss.DeviceKernels on the device: the owner map and
// semantic target (LossOwners), one branch's mask term (LossMask) and the
// semantic term (LossSemseg), as the kernels of kernels/loss_mask.cu.
// Each method checks what the host knows (buffer
// sizes), queues its kernels on the compute stream and returns; data-
// dependent outcomes (no positive, an image without instances) are
// handled on the device, and nothing crosses to the host.

// maxMaskCoefs is LM_MAX_NM in loss_mask.cu: the per-thread coefficient
// sums of the mask term's gradient.
const maxMaskCoefs = 64

// maskGeom lays out struct LossMaskGeom: int B, A, M, NM, H, W; float
// img_w, img_h; double scale.
func maskGeom(g *loss.Geometry, m int, scale float64) []byte {
	b := make([]byte, 40)
	for i, v := range []int{g.B, g.Anchors(), m, g.NM, g.ProtoH, g.ProtoW} {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	ih, iw := g.ImageSize()
	binary.LittleEndian.PutUint32(b[24:], math.Float32bits(iw))
	binary.LittleEndian.PutUint32(b[28:], math.Float32bits(ih))
	binary.LittleEndian.PutUint64(b[32:], math.Float64bits(scale))
	return b
}

// semGeom lays out struct LossSemGeom: long long nch, hw; double scale.
func semGeom(g *loss.Geometry, scale float64) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint64(b, uint64(g.B*g.NC))
	binary.LittleEndian.PutUint64(b[8:], uint64(g.SemH*g.SemW))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(scale))
	return b
}

// lossCheck panics unless every present buffer holds n elements; the
// names say which argument is short.
func lossCheck(op string, n int, bufs map[string]backend.Buffer) {
	for name, b := range bufs {
		if b.Present() && b.Len < n {
			panic(fmt.Sprintf("losscuda: %s: %s holds %d elements, want %d", op, name, b.Len, n))
		}
	}
}

// lossNeed panics unless every named buffer is present.
func lossNeed(op string, bufs map[string]backend.Buffer) {
	for name, b := range bufs {
		if !b.Present() {
			panic(fmt.Sprintf("losscuda: %s: %s is absent", op, name))
		}
	}
}

// LossOwners composes the owner map (owner, [B, ProtoH, ProtoW] int32: 1
// + the owning slot, 0 for background) and the semantic target (sem,
// [B, NC, SemH, SemW]) from the uploaded mask stack through p.Src: each
// slot's mask area (one block per slot), then per pixel the smallest
// covering mask, the later slot among equal areas — the result of
// painting by decreasing area, stable — and per semantic pixel the class
// of the owner at the nearest source pixel, the background reading the
// image's last-painted slot.
func (k Kernels) LossOwners(g loss.Geometry, t *loss.DeviceTargets, p *loss.DevicePadded, owner, sem backend.Buffer) {
	be := k.be
	const op = "loss owners"
	hw := g.ProtoH * g.ProtoW
	if hw <= 0 || g.B < 0 || p.M < 0 || g.NC < 1 || g.SemH < 1 || g.SemW < 1 {
		panic(fmt.Sprintf("losscuda: %s: bad geometry %+v with %d slots", op, g, p.M))
	}
	if t.MaskBytes < 0 || t.MaskBytes%hw != 0 || 4*t.Masks.Len < t.MaskBytes {
		panic(fmt.Sprintf("losscuda: %s: a mask stack of %d bytes in %d elements is not whole %dx%d masks",
			op, t.MaskBytes, t.Masks.Len, g.ProtoH, g.ProtoW))
	}
	lossNeed(op, map[string]backend.Buffer{"owner": owner, "sem": sem})
	lossCheck(op, g.B*hw, map[string]backend.Buffer{"owner": owner})
	lossCheck(op, g.B*g.NC*g.SemH*g.SemW, map[string]backend.Buffer{"sem": sem})
	lossCheck(op, g.B, map[string]backend.Buffer{"p.Count": p.Count})
	if g.B == 0 {
		return
	}
	if p.M == 0 {
		// No image has an instance: nothing owns a pixel, no class is set.
		be.Fill(owner.Slice(0, g.B*hw), 0)
		be.Fill(sem.Slice(0, g.B*g.NC*g.SemH*g.SemW), 0)
		return
	}
	lossNeed(op, map[string]backend.Buffer{"p.Src": p.Src, "p.Labels": p.Labels, "p.Count": p.Count, "t.Masks": t.Masks})
	lossCheck(op, g.B*p.M, map[string]backend.Buffer{"p.Src": p.Src, "p.Labels": p.Labels})
	geom := make([]byte, 32)
	for i, v := range []int{g.B, p.M, g.ProtoH, g.ProtoW, g.NC, g.SemH, g.SemW, t.MaskBytes / hw} {
		binary.LittleEndian.PutUint32(geom[4*i:], uint32(v))
	}
	masks, src, count, labels := be.Addr(t.Masks), be.Addr(p.Src), be.Addr(p.Count), be.Addr(p.Labels)
	area, release := be.Scratch(4 * g.B * p.M)
	defer release()
	orPanic(op, maskModule.Launch(be, "loss_owner_area", cudalaunch.Blocks(g.B*p.M), cudalaunch.PtrArg(masks), cudalaunch.PtrArg(src), cudalaunch.PtrArg(count), cudalaunch.PtrArg(area), cudalaunch.StructArg(geom)))
	orPanic(op, maskModule.Launch(be, "loss_owner_map", cudalaunch.Elements(g.B*hw), cudalaunch.PtrArg(masks), cudalaunch.PtrArg(src), cudalaunch.PtrArg(count), cudalaunch.PtrArg(area), cudalaunch.PtrArg(be.Addr(owner)), cudalaunch.StructArg(geom)))
	orPanic(op, maskModule.Launch(be, "loss_semantic", cudalaunch.Elements(g.B*g.SemH*g.SemW), cudalaunch.PtrArg(labels), cudalaunch.PtrArg(count), cudalaunch.PtrArg(area), cudalaunch.PtrArg(be.Addr(owner)),
		cudalaunch.PtrArg(be.Addr(sem)), cudalaunch.StructArg(geom)))
}

// LossMask is one branch's mask term (trainer/loss's maskScratch.loss):
// the positives gathered per image in anchor order with their crops (one
// block per image), each positive's cropped BCE and coefficient gradient
// (one block per positive), the prototype gradient (one thread per
// prototype pixel, adding the image's positives in order), and the term,
// Σ over images of their positives' losses divided by NumFG, into
// terms[0:2] as a float64. Without a positive the term is 0 and no
// gradient is touched. coefG and protoG may be absent.
func (k Kernels) LossMask(g loss.Geometry, a *loss.DeviceAssignment, p *loss.DevicePadded, owner, coef, proto backend.Buffer, scale float64, coefG, protoG, terms backend.Buffer) {
	be := k.be
	const op = "loss mask"
	A, hw := g.Anchors(), g.ProtoH*g.ProtoW
	if g.B < 0 || p.M < 0 || g.NM < 1 || g.NM > maxMaskCoefs || hw <= 0 || len(g.Levels) == 0 {
		panic(fmt.Sprintf("losscuda: %s: bad geometry %+v with %d slots (at most %d coefficients)", op, g, p.M, maxMaskCoefs))
	}
	lossNeed(op, map[string]backend.Buffer{"terms": terms, "a.NumFG": a.NumFG})
	lossCheck(op, 2, map[string]backend.Buffer{"terms": terms})
	lossCheck(op, 1, map[string]backend.Buffer{"a.NumFG": a.NumFG})
	if g.B == 0 || p.M == 0 {
		// No slot, so no positive: the term is 0 (Forward returns before it).
		be.Fill(terms.Slice(0, 2), 0)
		return
	}
	lossNeed(op, map[string]backend.Buffer{"a.FG": a.FG, "a.GTIdx": a.GTIdx, "p.Boxes": p.Boxes,
		"owner": owner, "coef": coef, "proto": proto})
	lossCheck(op, g.B*A, map[string]backend.Buffer{"a.FG": a.FG, "a.GTIdx": a.GTIdx})
	lossCheck(op, g.B*p.M*4, map[string]backend.Buffer{"p.Boxes": p.Boxes})
	lossCheck(op, g.B*hw, map[string]backend.Buffer{"owner": owner})
	lossCheck(op, g.B*g.NM*A, map[string]backend.Buffer{"coef": coef, "coefG": coefG})
	lossCheck(op, g.B*g.NM*hw, map[string]backend.Buffer{"proto": proto, "protoG": protoG})
	geom := cudalaunch.StructArg(maskGeom(&g, p.M, scale))
	rows := g.B * A
	// Per row (image b's at b·A): area and loss (float64), anchor, slot,
	// crop (4 int32); then the per-image counts.
	ws, release := be.Scratch(40*rows + 4*g.B)
	defer release()
	area, rowLoss := ws, ws.Add(8*rows)
	anchor, gt, crop := ws.Add(16*rows), ws.Add(20*rows), ws.Add(24*rows)
	count := ws.Add(40 * rows)
	numFG := be.Addr(a.NumFG)
	orPanic(op, maskModule.Launch(be, "loss_mask_gather", cudalaunch.Blocks(g.B), cudalaunch.PtrArg(be.Addr(a.FG)), cudalaunch.PtrArg(be.Addr(a.GTIdx)), cudalaunch.PtrArg(be.Addr(p.Boxes)),
		cudalaunch.PtrArg(anchor), cudalaunch.PtrArg(gt), cudalaunch.PtrArg(crop), cudalaunch.PtrArg(area), cudalaunch.PtrArg(count), geom))
	orPanic(op, maskModule.Launch(be, "loss_mask_rows", cudalaunch.Blocks(rows), cudalaunch.PtrArg(be.Addr(coef)), cudalaunch.PtrArg(be.Addr(proto)), cudalaunch.PtrArg(be.Addr(owner)),
		cudalaunch.PtrArg(anchor), cudalaunch.PtrArg(gt), cudalaunch.PtrArg(crop), cudalaunch.PtrArg(area), cudalaunch.PtrArg(count), cudalaunch.PtrArg(numFG), cudalaunch.PtrArg(be.Addr(coefG)),
		cudalaunch.PtrArg(rowLoss), geom))
	if protoG.Present() {
		orPanic(op, maskModule.Launch(be, "loss_mask_proto_grad", cudalaunch.Elements(g.B*hw), cudalaunch.PtrArg(be.Addr(coef)), cudalaunch.PtrArg(be.Addr(proto)), cudalaunch.PtrArg(be.Addr(owner)),
			cudalaunch.PtrArg(anchor), cudalaunch.PtrArg(gt), cudalaunch.PtrArg(crop), cudalaunch.PtrArg(area), cudalaunch.PtrArg(count), cudalaunch.PtrArg(numFG), cudalaunch.PtrArg(be.Addr(protoG)), geom))
	}
	orPanic(op, maskModule.Launch(be, "loss_mask_finish", cudalaunch.OneBlock(), cudalaunch.PtrArg(rowLoss), cudalaunch.PtrArg(count), cudalaunch.PtrArg(numFG), cudalaunch.PtrArg(be.Addr(terms)), geom))
}

// LossSemseg is the semantic term (trainer/loss's semScratch.loss):
// 0.5·BCE (mean over all elements) + 0.5·Dice (mean over channels,
// smoothing 1) of logits against sem, both [B, NC, SemH, SemW], one block
// per channel, into terms[0:2] as a float64; grad, when present, takes
// scale·dL/dlogit added.
func (k Kernels) LossSemseg(g loss.Geometry, logits, sem backend.Buffer, scale float64, grad, terms backend.Buffer) {
	be := k.be
	const op = "loss semseg"
	nch, hw := g.B*g.NC, g.SemH*g.SemW
	if g.B < 0 || g.NC < 1 || hw <= 0 {
		panic(fmt.Sprintf("losscuda: %s: bad geometry %+v", op, g))
	}
	lossNeed(op, map[string]backend.Buffer{"logits": logits, "sem": sem, "terms": terms})
	lossCheck(op, nch*hw, map[string]backend.Buffer{"logits": logits, "sem": sem, "grad": grad})
	lossCheck(op, 2, map[string]backend.Buffer{"terms": terms})
	geom := cudalaunch.StructArg(semGeom(&g, scale))
	stats, release := be.Scratch(16 * max(nch, 1))
	defer release()
	orPanic(op, maskModule.Launch(be, "loss_sem_channel", cudalaunch.Blocks(nch), cudalaunch.PtrArg(be.Addr(logits)), cudalaunch.PtrArg(be.Addr(sem)), cudalaunch.PtrArg(be.Addr(grad)), cudalaunch.PtrArg(stats), geom))
	orPanic(op, maskModule.Launch(be, "loss_sem_finish", cudalaunch.OneBlock(), cudalaunch.PtrArg(stats), cudalaunch.PtrArg(be.Addr(terms)), geom))
}
