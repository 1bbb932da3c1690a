package loss

import (
	"fmt"
	"math"
	"slices"
)

// assignEps is the reference assigner's eps: the candidate-inside test and the
// score normalisation both use it.
const assignEps = 1e-9

// AssignerConfig holds one branch's task-aligned assignment settings.
type AssignerConfig struct {
	// TopK is the number of anchors each GT keeps by alignment metric
	// (10 for one-to-many, 7 for one-to-one).
	TopK int
	// TopK2, when in (0, TopK), keeps only that many anchors per GT after
	// the multi-GT resolution (1 for one-to-one). 0 or TopK disables it.
	TopK2 int
	// Alpha and Beta are the score and IoU powers of the alignment metric.
	Alpha, Beta float64
	// SmallSide and SmallSideTo are the STAL rule: any GT side shorter than
	// SmallSide pixels is widened to SmallSideTo pixels, around its centre,
	// for the candidate test only (the model's strides 0 and 1: 8 and 16).
	SmallSide, SmallSideTo float64
}

// One2ManyAssigner is the reference's one-to-many assigner: top-10, no second stage.
func One2ManyAssigner() AssignerConfig {
	return AssignerConfig{TopK: 10, Alpha: 0.5, Beta: 6, SmallSide: 8, SmallSideTo: 16}
}

// One2OneAssigner is the reference's one-to-one assigner: top-7, then one anchor per GT.
func One2OneAssigner() AssignerConfig {
	return AssignerConfig{TopK: 7, TopK2: 1, Alpha: 0.5, Beta: 6, SmallSide: 8, SmallSideTo: 16}
}

// AssignInput is one batch as the assigner sees it: predictions for B images
// and A anchors, and GT lists padded to M slots per image.
type AssignInput struct {
	B, A, NC, M int
	// PdScores are class probabilities (sigmoid of the logits) laid out like
	// the head's output, [B, NC, A].
	PdScores []float32
	// PdBoxes are decoded predicted boxes, xyxy input pixels, [B, A, 4].
	PdBoxes []float32
	// Anchors are anchor centres in input pixels, [A, 2].
	Anchors []float32
	// GTLabels [B, M], GTBoxes [B, M, 4] (xyxy pixels) and MaskGT [B, M]
	// describe the padded GT slots; padding slots have MaskGT false.
	GTLabels []int32
	GTBoxes  []float32
	MaskGT   []bool
}

// Assignment is the assigner's result. Slices are owned by the Assigner
// that produced it and are overwritten by its next call.
type Assignment struct {
	B, A, M int
	// FG marks positive anchors, [B, A].
	FG []bool
	// GTIdx is the GT slot of each anchor within its image's padded list,
	// [B, A]. Background anchors carry slot 0, as the reference does; read it
	// only where FG is set.
	GTIdx []int32
	// Labels [B, A] and Boxes [B, A, 4] (xyxy pixels) are the class and box of
	// slot GTIdx; meaningless on background anchors.
	Labels []int32
	Boxes  []float32
	// ScoreValue is the target score of the anchor's label channel (all
	// other channels are 0), [B, A]; 0 on background.
	ScoreValue []float32
	// Internals, [B, M, A], kept for inspection and tests: candidates after
	// STAL, alignment metric and CIoU (zero outside candidate ∧ valid), the
	// top-k picks (∧ candidate ∧ valid) and the final positive mask.
	MaskInGTs, MaskPosTopK, MaskPos []bool
	AlignMetric, Overlaps           []float32
	// NumFG counts positives over the batch.
	NumFG int
}

// Assigner runs task-aligned assignment over a whole batch at once. Its
// buffers are reused across calls; it is not safe for concurrent use.
type Assigner struct {
	cfg AssignerConfig
	res Assignment
	idx []int32   // top-k scratch
	met []float32 // masked-metric scratch
	mpm []float64
}

// NewAssigner checks cfg and returns an Assigner.
func NewAssigner(cfg AssignerConfig) (*Assigner, error) {
	if cfg.TopK < 1 {
		return nil, fmt.Errorf("assigner: topk %d < 1", cfg.TopK)
	}
	if cfg.TopK2 < 0 {
		return nil, fmt.Errorf("assigner: topk2 %d < 0", cfg.TopK2)
	}
	return &Assigner{cfg: cfg}, nil
}

func growBool(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func growF64(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func growI32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (in *AssignInput) check() error {
	switch {
	case in.B < 0 || in.A < 1 || in.NC < 1 || in.M < 0:
		return fmt.Errorf("assigner: bad sizes B=%d A=%d NC=%d M=%d", in.B, in.A, in.NC, in.M)
	case len(in.PdScores) != in.B*in.NC*in.A:
		return fmt.Errorf("assigner: pd_scores has %d values, want B*NC*A=%d", len(in.PdScores), in.B*in.NC*in.A)
	case len(in.PdBoxes) != in.B*in.A*4:
		return fmt.Errorf("assigner: pd_bboxes has %d values, want B*A*4=%d", len(in.PdBoxes), in.B*in.A*4)
	case len(in.Anchors) != in.A*2:
		return fmt.Errorf("assigner: anchors has %d values, want A*2=%d", len(in.Anchors), in.A*2)
	case len(in.GTLabels) != in.B*in.M || len(in.MaskGT) != in.B*in.M || len(in.GTBoxes) != in.B*in.M*4:
		return fmt.Errorf("assigner: gt arrays %d/%d/%d values, want B*M=%d (boxes ×4)", len(in.GTLabels), len(in.MaskGT), len(in.GTBoxes), in.B*in.M)
	}
	for i, l := range in.GTLabels {
		if in.MaskGT[i] && (l < 0 || int(l) >= in.NC) {
			return fmt.Errorf("assigner: image %d gt slot %d: class %d outside [0,%d)", i/max(in.M, 1), i%max(in.M, 1), l, in.NC)
		}
	}
	return nil
}

// Assign computes the task-aligned assignment of the whole batch. The
// returned Assignment aliases the Assigner's buffers.
func (as *Assigner) Assign(in *AssignInput) (*Assignment, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	cfg := as.cfg
	B, A, M, NC := in.B, in.A, in.M, in.NC
	r := &as.res
	r.B, r.A, r.M, r.NumFG = B, A, M, 0
	r.FG = growBool(r.FG, B*A)
	r.GTIdx = growI32(r.GTIdx, B*A)
	r.Labels = growI32(r.Labels, B*A)
	r.Boxes = growF32(r.Boxes, B*A*4)
	r.ScoreValue = growF32(r.ScoreValue, B*A)
	r.MaskInGTs = growBool(r.MaskInGTs, B*M*A)
	r.MaskPosTopK = growBool(r.MaskPosTopK, B*M*A)
	r.MaskPos = growBool(r.MaskPos, B*M*A)
	r.AlignMetric = growF32(r.AlignMetric, B*M*A)
	r.Overlaps = growF32(r.Overlaps, B*M*A)
	if M == 0 {
		// No GT anywhere: labels would be NC in the reference, but every
		// consumer reads labels only under FG, which is all false here.
		return r, nil
	}

	// Candidates (STAL), CIoU and the alignment metric for every
	// (image, GT slot, anchor) at once.
	for bm := 0; bm < B*M; bm++ {
		if !in.MaskGT[bm] {
			continue
		}
		b := bm / M
		g := in.GTBoxes[bm*4 : bm*4+4]
		gt := [4]float32{g[0], g[1], g[2], g[3]}
		// The reference does this arithmetic in float32 (xyxy→xywh→xyxy);
		// follow it so that edge-touching anchors fall on the same side.
		cx, cy := (g[0]+g[2])/2, (g[1]+g[3])/2
		w, h := g[2]-g[0], g[3]-g[1]
		if float64(w) < cfg.SmallSide {
			w = float32(cfg.SmallSideTo)
		}
		if float64(h) < cfg.SmallSide {
			h = float32(cfg.SmallSideTo)
		}
		x1, y1, x2, y2 := cx-w/2, cy-h/2, cx+w/2, cy+h/2
		label := int(in.GTLabels[bm])
		row := bm * A
		scores := in.PdScores[(b*NC+label)*A : (b*NC+label+1)*A]
		for a := 0; a < A; a++ {
			ax, ay := in.Anchors[2*a], in.Anchors[2*a+1]
			d := min(ax-x1, ay-y1, x2-ax, y2-ay)
			if !(d > assignEps) {
				continue
			}
			r.MaskInGTs[row+a] = true
			p := in.PdBoxes[(b*A+a)*4 : (b*A+a)*4+4]
			ov := max(ciou32(gt, [4]float32{p[0], p[1], p[2], p[3]}), 0)
			r.Overlaps[row+a] = ov
			r.AlignMetric[row+a] = float32(math.Pow(float64(scores[a]), cfg.Alpha)) * float32(math.Pow(float64(ov), cfg.Beta))
		}
	}

	// Top-k per GT row over all anchors, zeros included; a pick counts only
	// where the anchor is a candidate of a valid GT.
	k := min(cfg.TopK, A)
	for bm := 0; bm < B*M; bm++ {
		if !in.MaskGT[bm] {
			continue
		}
		row := bm * A
		as.idx = topK(r.AlignMetric[row:row+A], k, as.idx)
		for _, a := range as.idx {
			if r.MaskInGTs[row+int(a)] {
				r.MaskPosTopK[row+int(a)] = true
			}
		}
	}
	copy(r.MaskPos, r.MaskPosTopK)

	// Anchors claimed by several GTs go to the GT with the largest CIoU over
	// all M slots (first index on ties).
	for b := 0; b < B; b++ {
		for a := 0; a < A; a++ {
			n := 0
			for m := 0; m < M; m++ {
				if r.MaskPos[(b*M+m)*A+a] {
					n++
				}
			}
			if n <= 1 {
				continue
			}
			best, bestV := 0, r.Overlaps[b*M*A+a]
			for m := 1; m < M; m++ {
				if v := r.Overlaps[(b*M+m)*A+a]; v > bestV {
					best, bestV = m, v
				}
			}
			for m := 0; m < M; m++ {
				r.MaskPos[(b*M+m)*A+a] = m == best
			}
		}
	}

	// One-to-one narrowing: each GT keeps its TopK2 best remaining anchors,
	// ranked over all anchors by the metric masked to its positives.
	if cfg.TopK2 > 0 && cfg.TopK2 != cfg.TopK {
		as.met = growF32(as.met, A)
		k2 := min(cfg.TopK2, A)
		for bm := 0; bm < B*M; bm++ {
			row := bm * A
			hasPos := false
			for a := 0; a < A; a++ {
				as.met[a] = 0
				if r.MaskPos[row+a] {
					as.met[a] = r.AlignMetric[row+a]
					hasPos = true
				}
			}
			if !hasPos {
				continue
			}
			as.idx = topK(as.met, k2, as.idx)
			for a := 0; a < A; a++ {
				if r.MaskPos[row+a] && !slices.Contains(as.idx, int32(a)) {
					r.MaskPos[row+a] = false
				}
			}
		}
	}

	// Targets. target_gt_idx is the argmax over slots of the final mask
	// (slot 0 for background); the score is the metric rescaled so that
	// each GT's best anchor scores that GT's best CIoU.
	as.mpm = growF64(as.mpm, 2*B*M)
	maxMet, maxOv := as.mpm[:B*M], as.mpm[B*M:]
	for bm := 0; bm < B*M; bm++ {
		row := bm * A
		for a := 0; a < A; a++ {
			if r.MaskPos[row+a] {
				maxMet[bm] = max(maxMet[bm], float64(r.AlignMetric[row+a]))
				maxOv[bm] = max(maxOv[bm], float64(r.Overlaps[row+a]))
			}
		}
	}
	for b := 0; b < B; b++ {
		for a := 0; a < A; a++ {
			ba := b*A + a
			gi := 0
			norm := 0.0
			for m := 0; m < M; m++ {
				if !r.MaskPos[(b*M+m)*A+a] {
					continue
				}
				if !r.FG[ba] {
					gi = m
				}
				r.FG[ba] = true
				bm := b*M + m
				v := float64(float32(float64(r.AlignMetric[bm*A+a])*maxOv[bm]) / float32(maxMet[bm]+assignEps))
				norm = max(norm, v)
			}
			slot := b*M + gi
			r.GTIdx[ba] = int32(gi)
			r.Labels[ba] = max(in.GTLabels[slot], 0)
			copy(r.Boxes[ba*4:ba*4+4], in.GTBoxes[slot*4:slot*4+4])
			if r.FG[ba] {
				r.ScoreValue[ba] = float32(norm)
				r.NumFG++
			}
		}
	}
	return r, nil
}

// topK writes into idx the indices of the k largest values of v, largest
// first, lower index first among equal values. It is a partial selection,
// O(len(v)·k), which beats sorting for the small k used here.
func topK(v []float32, k int, idx []int32) []int32 {
	idx = idx[:0]
	for i, x := range v {
		if len(idx) < k {
			idx = append(idx, int32(i))
		} else if x > v[idx[k-1]] {
			idx[k-1] = int32(i)
		} else {
			continue
		}
		for j := len(idx) - 1; j > 0 && v[idx[j]] > v[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}
