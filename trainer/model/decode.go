package model

import (
	"fmt"
	"math"
	"sort"
)

// Detection is one decoded one-to-one prediction.
type Detection struct {
	Box    [4]float32 // x1, y1, x2, y2 in input pixels
	Score  float32    // sigmoid of the class logit
	Class  int
	Anchor int       // index into the anchor axis (P3, P4, P5 grids in order)
	Coeffs []float32 // NumMasks mask coefficients; masks = sigmoid(Coeffs · Proto)
}

// Decode turns the one-to-one outputs into at most maxDet detections per
// image, the end-to-end (NMS-free) rule of the reference: keep the
// min(maxDet, anchors) anchors with the highest best-class score, then the
// same number of (anchor, class) pairs with the highest score among them,
// sorted by score (ties: lower anchor, then lower class first). Boxes
// decode l, t, r, b distances from the cell centre, times the stride.
func Decode(out *Output, maxDet int) ([][]Detection, error) {
	b := out.One2One
	if b.Boxes == nil || b.Scores == nil || b.MaskCoefficients == nil || !b.Boxes.Buffer().Present() {
		return nil, fmt.Errorf("model: Decode needs the one-to-one outputs")
	}
	if maxDet < 1 {
		return nil, fmt.Errorf("model: Decode maxDet %d: want at least 1", maxDet)
	}
	bs, nc, na := b.Scores.Shape[0], b.Scores.Shape[1], b.Scores.Shape[2]
	// Anchor centres and strides from the level grids.
	ax := make([]float32, 0, na)
	ay := make([]float32, 0, na)
	st := make([]float32, 0, na)
	for i, f := range out.Feats {
		h, w := f.Shape[2], f.Shape[3]
		for y := range h {
			for x := range w {
				ax, ay, st = append(ax, float32(x)+0.5), append(ay, float32(y)+0.5), append(st, float32(Strides[i]))
			}
		}
	}
	if len(ax) != na {
		return nil, fmt.Errorf("model: %d anchors in the outputs, %d in the feature grids", na, len(ax))
	}
	k := min(maxDet, na)
	res := make([][]Detection, bs)
	// The one crossing of decoding: the one-to-one outputs come down once.
	scores, boxes, coefs := b.Scores.ToHost(nil), b.Boxes.ToHost(nil), b.MaskCoefficients.ToHost(nil)
	best := make([]float32, na)
	order := make([]int, na)
	type pair struct {
		a, c int
		s    float32
	}
	pairs := make([]pair, 0, k*nc)
	for n := range bs {
		sc := scores[n*nc*na : (n+1)*nc*na]
		for a := range na {
			m := float32(math.Inf(-1))
			for c := range nc {
				m = max(m, sc[c*na+a])
			}
			best[a] = m // logits: sigmoid is monotonic, so rank on logits
			order[a] = a
		}
		sort.SliceStable(order, func(i, j int) bool { return best[order[i]] > best[order[j]] })
		pairs = pairs[:0]
		for _, a := range order[:k] {
			for c := range nc {
				pairs = append(pairs, pair{a, c, sc[c*na+a]})
			}
		}
		sort.SliceStable(pairs, func(i, j int) bool {
			if pairs[i].s != pairs[j].s {
				return pairs[i].s > pairs[j].s
			}
			if pairs[i].a != pairs[j].a {
				return pairs[i].a < pairs[j].a
			}
			return pairs[i].c < pairs[j].c
		})
		bx := boxes[n*4*na : (n+1)*4*na]
		mc := coefs[n*NumMasks*na : (n+1)*NumMasks*na]
		dets := make([]Detection, k)
		for i, p := range pairs[:k] {
			a := p.a
			d := Detection{Score: sigmoid32(p.s), Class: p.c, Anchor: a, Coeffs: make([]float32, NumMasks)}
			d.Box = [4]float32{
				(ax[a] - bx[0*na+a]) * st[a], (ay[a] - bx[1*na+a]) * st[a],
				(ax[a] + bx[2*na+a]) * st[a], (ay[a] + bx[3*na+a]) * st[a],
			}
			for j := range NumMasks {
				d.Coeffs[j] = mc[j*na+a]
			}
			dets[i] = d
		}
		res[n] = dets
	}
	return res, nil
}

func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }
