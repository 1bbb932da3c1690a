package metrics

import (
	"cmp"
	"math"
	"slices"
)

// imgCat is one (image, category) cell of COCOeval: the ground truth in
// annotation order and the detections already stably sorted by descending
// score and cut to MaxDets[2].
type imgCat struct {
	gtArea  []float64
	gtCrowd []bool
	gtID    []int64
	dtScore []float64
	dtArea  []float64
	// iou[d*len(gt)+g] is the IoU of detection d with ground truth g, in
	// the orders above; -1 never matches.
	iou []float64
}

// detRecord is what accumulate needs of one detection after matching: its
// score, its rank within its (image, category) and, per area range, one
// bit per IoU threshold for "matched" and for "ignored".
type detRecord struct {
	score   float64
	seq     int32 // position in the category's insertion order
	rank    int32
	matched [numArea]uint16
	ignored [numArea]uint16
}

type catState struct {
	id   int64
	recs []detRecord
	npig [numArea]int
	// hasEval records that some image had ground truth or detections of
	// this category (COCOeval's evalImgs entry is not None).
	hasEval bool
}

// core is the single implementation of COCOeval's evaluateImg and
// accumulate, shared by the COCO-file evaluator and the epoch metric.
// Cells must be added in ascending image order: accumulate's stable sort
// breaks score ties by that order.
type core struct {
	cats   []*catState
	catIdx map[int64]int

	// scratch reused across cells
	gtOrder []int
	gtIg    []bool
	gtm     []bool
	recBuf  []detRecord
}

func newCore() *core { return &core{catIdx: map[int64]int{}} }

func (c *core) category(id int64) *catState {
	if i, ok := c.catIdx[id]; ok {
		return c.cats[i]
	}
	c.catIdx[id] = len(c.cats)
	cs := &catState{id: id}
	c.cats = append(c.cats, cs)
	return cs
}

// scoreOrder returns the indices of scores stably sorted by descending
// score (numpy.argsort(-scores, kind='mergesort')), cut to limit.
func scoreOrder(dst []int, scores []float64, limit int) []int {
	dst = dst[:0]
	for i := range scores {
		dst = append(dst, i)
	}
	slices.SortStableFunc(dst, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	if len(dst) > limit {
		dst = dst[:limit]
	}
	return dst
}

// add runs evaluateImg for every area range of one (image, category) cell
// and stores the outcome.
func (c *core) add(catID int64, in *imgCat) {
	G, D := len(in.gtArea), len(in.dtScore)
	if G == 0 && D == 0 {
		return
	}
	cs := c.category(catID)
	cs.hasEval = true
	recs := c.recBuf[:0]
	for d := 0; d < D; d++ {
		recs = append(recs, detRecord{score: in.dtScore[d], seq: int32(len(cs.recs) + d), rank: int32(d)})
	}
	for a, rng := range AreaRanges {
		// gtIg and the stable "non-ignored first" order of evaluateImg.
		c.gtIg = c.gtIg[:0]
		c.gtOrder = c.gtOrder[:0]
		for g := 0; g < G; g++ {
			ig := in.gtCrowd[g] || rng.outside(in.gtArea[g])
			c.gtIg = append(c.gtIg, ig)
			if !ig {
				c.gtOrder = append(c.gtOrder, g)
				cs.npig[a]++
			}
		}
		for g := 0; g < G; g++ {
			if c.gtIg[g] {
				c.gtOrder = append(c.gtOrder, g)
			}
		}
		if G > 0 && D > 0 {
			c.match(in, a, recs)
		}
		for d := 0; d < D; d++ {
			if rng.outside(in.dtArea[d]) {
				// An unmatched detection outside the range is ignored.
				recs[d].ignored[a] |= ^recs[d].matched[a] & (1<<numThr - 1)
			}
		}
	}
	cs.recs = append(cs.recs, recs...)
	c.recBuf = recs
}

// match is evaluateImg's greedy matching for one area range.
func (c *core) match(in *imgCat, a int, recs []detRecord) {
	G := len(in.gtArea)
	if cap(c.gtm) < G {
		c.gtm = make([]bool, G)
	}
	gtm := c.gtm[:G]
	for t, thr := range IoUThresholds {
		clear(gtm)
		bit := uint16(1) << t
		for d := range recs {
			iou := math.Min(thr, 1-1e-10)
			m := -1
			row := in.iou[d*G : d*G+G]
			for _, g := range c.gtOrder {
				if gtm[g] && !in.gtCrowd[g] {
					continue
				}
				// Once a real ground truth is held, the ignored ones (all
				// after it in this order) cannot replace it.
				if m > -1 && !c.gtIg[m] && c.gtIg[g] {
					break
				}
				if row[g] < iou {
					continue
				}
				iou = row[g]
				m = g
			}
			if m == -1 {
				continue
			}
			if c.gtIg[m] {
				recs[d].ignored[a] |= bit
			}
			// COCOeval stores the ground truth's id and tests it for
			// non-zero, so a match with an annotation whose id is 0 counts
			// as unmatched; kept for exactness.
			if in.gtID[m] != 0 {
				recs[d].matched[a] |= bit
			}
			gtm[m] = true
		}
	}
}

// evalArrays are COCOeval.eval['precision'] [T][R][K][A][M] and
// ['recall'] [T][K][A][M], flattened in that (C) order.
type evalArrays struct {
	catIDs    []int64
	precision []float64
	recall    []float64
}

func (e *evalArrays) pIdx(t, r, k, a, m int) int {
	K := len(e.catIDs)
	return (((t*numRec+r)*K+k)*numArea+a)*numMaxDet + m
}

func (e *evalArrays) rIdx(t, k, a, m int) int {
	K := len(e.catIDs)
	return ((t*K+k)*numArea+a)*numMaxDet + m
}

// accumulate is COCOeval.accumulate over the categories in ascending id
// order.
func (c *core) accumulate() *evalArrays {
	cats := slices.Clone(c.cats)
	slices.SortFunc(cats, func(a, b *catState) int { return cmp.Compare(a.id, b.id) })
	K := len(cats)
	e := &evalArrays{
		catIDs:    make([]int64, K),
		precision: make([]float64, numThr*numRec*K*numArea*numMaxDet),
		recall:    make([]float64, numThr*K*numArea*numMaxDet),
	}
	for i := range e.precision {
		e.precision[i] = -1
	}
	for i := range e.recall {
		e.recall[i] = -1
	}
	var rc, pr [numThr][]float64
	for k, cs := range cats {
		e.catIDs[k] = cs.id
		if !cs.hasEval {
			continue
		}
		recs := slices.Clone(cs.recs)
		// Stable by descending score: seq (insertion order, i.e. image
		// order then rank) breaks ties, so an unstable sort suffices.
		slices.SortFunc(recs, func(a, b detRecord) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
		for a := 0; a < numArea; a++ {
			npig := cs.npig[a]
			if npig == 0 {
				continue
			}
			for m, maxDet := range MaxDets {
				// One pass over the sorted detections feeds all ten
				// thresholds' cumulative arrays.
				for t := range rc {
					rc[t], pr[t] = rc[t][:0], pr[t][:0]
				}
				var tp, fp [numThr]float64
				for i := range recs {
					r := &recs[i]
					if int(r.rank) >= maxDet {
						continue
					}
					ig, mt := r.ignored[a], r.matched[a]
					for t := 0; t < numThr; t++ {
						bit := uint16(1) << t
						// Ignored detections add equal (tp, fp) entries to
						// COCOeval's cumulative arrays; dropping them changes
						// neither the interpolated precision nor the recall.
						if ig&bit != 0 {
							continue
						}
						if mt&bit != 0 {
							tp[t]++
						} else {
							fp[t]++
						}
						rc[t] = append(rc[t], tp[t]/float64(npig))
						pr[t] = append(pr[t], tp[t]/(fp[t]+tp[t]+eps))
					}
				}
				for t := 0; t < numThr; t++ {
					e.interpolate(rc[t], pr[t], t, k, a, m)
				}
			}
		}
	}
	return e
}

// interpolate stores one threshold's recall and its precision at the
// recall thresholds: precision made non-increasing from the right, then
// read at searchsorted(rc, recThrs, side='left'), 0 past the end.
func (e *evalArrays) interpolate(rc, pr []float64, t, k, a, m int) {
	nd := len(rc)
	if nd > 0 {
		e.recall[e.rIdx(t, k, a, m)] = rc[nd-1]
	} else {
		e.recall[e.rIdx(t, k, a, m)] = 0
	}
	for i := nd - 1; i > 0; i-- {
		if pr[i] > pr[i-1] {
			pr[i-1] = pr[i]
		}
	}
	pi := 0
	for ri, thr := range RecallThresholds {
		for pi < nd && rc[pi] < thr {
			pi++
		}
		q := 0.0
		if pi < nd {
			q = pr[pi]
		}
		e.precision[e.pIdx(t, ri, k, a, m)] = q
	}
}

// eps is numpy.spacing(1).
const eps = 2.220446049250313e-16
