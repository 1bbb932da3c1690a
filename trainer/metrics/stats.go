package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// NumStats is the number of COCO summary statistics.
const NumStats = 12

// StatNames name the entries of Stats in COCOeval.stats order.
var StatNames = [NumStats]string{"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"}

// Stats are COCOeval.stats: AP@[.5:.95], AP@.5, AP@.75, AP small, medium,
// large (maxDets 100); AR at maxDets 1, 10, 100; AR small, medium, large
// (maxDets 100). An entry is -1 when nothing defines it (no ground truth in
// that area range).
type Stats [NumStats]float64

// MarshalJSON writes the stats as an object keyed by StatNames.
func (s Stats) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range StatNames {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", n, jsonFloat(s[i]))
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func jsonFloat(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// CategoryStats are the 12 statistics restricted to one category, averaged
// as COCOeval.summarize averages over all categories.
type CategoryStats struct {
	ID    int64  `json:"category_id"`
	Name  string `json:"name,omitempty"`
	Stats Stats  `json:"stats"`
}

// IoUType selects what a detection is compared by.
type IoUType string

// The two COCOeval iouTypes this package implements.
const (
	BBox IoUType = "bbox"
	Segm IoUType = "segm"
)

// Result is one evaluation: the summary and each category's statistics in
// ascending category id order.
type Result struct {
	IoUType     IoUType         `json:"iou_type"`
	Stats       Stats           `json:"stats"`
	PerCategory []CategoryStats `json:"per_category"`
}

// summary describes one line of COCOeval.summarize.
type summary struct {
	ap     bool
	thr    int // index into IoUThresholds, -1 for all
	area   int
	maxDet int // index into MaxDets
}

var summaries = [NumStats]summary{
	{true, -1, 0, 2}, {true, 0, 0, 2}, {true, 5, 0, 2},
	{true, -1, 1, 2}, {true, -1, 2, 2}, {true, -1, 3, 2},
	{false, -1, 0, 0}, {false, -1, 0, 1}, {false, -1, 0, 2},
	{false, -1, 1, 2}, {false, -1, 2, 2}, {false, -1, 3, 2},
}

// stats averages e like summarize(): the mean of the entries > -1 in C
// order (threshold, recall point, category), by numpy's pairwise sum.
// k < 0 means all categories.
func (e *evalArrays) stats(k int) Stats {
	var s Stats
	var vals []float64
	K := len(e.catIDs)
	for i, sm := range summaries {
		vals = vals[:0]
		t0, t1 := 0, numThr
		if sm.thr >= 0 {
			t0, t1 = sm.thr, sm.thr+1
		}
		k0, k1 := 0, K
		if k >= 0 {
			k0, k1 = k, k+1
		}
		for t := t0; t < t1; t++ {
			if sm.ap {
				for r := 0; r < numRec; r++ {
					for kk := k0; kk < k1; kk++ {
						if v := e.precision[e.pIdx(t, r, kk, sm.area, sm.maxDet)]; v > -1 {
							vals = append(vals, v)
						}
					}
				}
			} else {
				for kk := k0; kk < k1; kk++ {
					if v := e.recall[e.rIdx(t, kk, sm.area, sm.maxDet)]; v > -1 {
						vals = append(vals, v)
					}
				}
			}
		}
		if len(vals) == 0 {
			s[i] = -1
		} else {
			s[i] = pairwiseSum(vals) / float64(len(vals))
		}
	}
	return s
}

// pairwiseSum is numpy's float64 add.reduce (pairwise summation with
// 8-way unrolled blocks of up to 128), so means agree with numpy.mean to
// the last bit rather than within rounding.
func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, v := range a {
			res += v
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := 0; j < 8; j++ {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
	}
}

func (e *evalArrays) result(typ IoUType, names map[int64]string) *Result {
	res := &Result{IoUType: typ, Stats: e.stats(-1)}
	for k, id := range e.catIDs {
		res.PerCategory = append(res.PerCategory, CategoryStats{ID: id, Name: names[id], Stats: e.stats(k)})
	}
	return res
}

// WriteTable prints the summary exactly as COCOeval.summarize() does: twelve
// lines, three decimals.
func (r *Result) WriteTable(w io.Writer) error {
	for _, line := range r.Stats.lines() {
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// lines formats the 12 summarize() lines.
func (s Stats) lines() []string {
	out := make([]string, 0, NumStats)
	for i, sm := range summaries {
		title, typ := "Average Recall", "(AR)"
		if sm.ap {
			title, typ = "Average Precision", "(AP)"
		}
		iou := fmt.Sprintf("%0.2f:%0.2f", IoUThresholds[0], IoUThresholds[numThr-1])
		if sm.thr >= 0 {
			iou = fmt.Sprintf("%0.2f", IoUThresholds[sm.thr])
		}
		out = append(out, fmt.Sprintf(" %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f",
			title, typ, iou, AreaRanges[sm.area].Label, MaxDets[sm.maxDet], s[i]))
	}
	return out
}
