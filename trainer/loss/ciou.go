package loss

import "math"

// ciouEps is the eps of the reference's bbox_iou: it enters both heights, the
// union and the squared enclosing diagonal.
const ciouEps = 1e-7

// ciouState keeps the intermediates of one CIoU evaluation so that the
// backward pass does not recompute them.
type ciouState struct {
	a, b                     [4]float64
	w1, h1, w2, h2           float64
	iwRaw, ihRaw, iw, ih     float64
	inter, union, iou        float64
	cw, ch, c2, rho2, sx, sy float64
	dtheta, v, alpha         float64
}

// ciou computes the complete IoU of box a against box b (both xyxy), exactly
// the reference's bbox_iou(xywh=False, CIoU=True, eps=1e-7). The aspect term's
// alpha is treated as a constant, as the reference computes it under no_grad.
func ciou(a, b [4]float64) (float64, ciouState) {
	var s ciouState
	s.a, s.b = a, b
	s.w1, s.h1 = a[2]-a[0], a[3]-a[1]+ciouEps
	s.w2, s.h2 = b[2]-b[0], b[3]-b[1]+ciouEps
	s.iwRaw = math.Min(a[2], b[2]) - math.Max(a[0], b[0])
	s.ihRaw = math.Min(a[3], b[3]) - math.Max(a[1], b[1])
	s.iw, s.ih = math.Max(s.iwRaw, 0), math.Max(s.ihRaw, 0)
	s.inter = s.iw * s.ih
	s.union = s.w1*s.h1 + s.w2*s.h2 - s.inter + ciouEps
	s.iou = s.inter / s.union
	s.cw = math.Max(a[2], b[2]) - math.Min(a[0], b[0])
	s.ch = math.Max(a[3], b[3]) - math.Min(a[1], b[1])
	s.c2 = s.cw*s.cw + s.ch*s.ch + ciouEps
	s.sx = b[0] + b[2] - a[0] - a[2]
	s.sy = b[1] + b[3] - a[1] - a[3]
	s.rho2 = (s.sx*s.sx + s.sy*s.sy) / 4
	s.dtheta = math.Atan(s.w2/s.h2) - math.Atan(s.w1/s.h1)
	s.v = 4 / (math.Pi * math.Pi) * s.dtheta * s.dtheta
	s.alpha = s.v / (s.v - s.iou + (1 + ciouEps))
	return s.iou - (s.rho2/s.c2 + s.v*s.alpha), s
}

// minGrad and maxGrad give the share of the gradient that min(x, y) or
// max(x, y) passes to x: all of it when x wins, half on a tie (the
// reference's minimum/maximum backward), none when y wins.
func minGrad(x, y float64) float64 {
	switch {
	case x < y:
		return 1
	case x == y:
		return 0.5
	}
	return 0
}

func maxGrad(x, y float64) float64 { return minGrad(y, x) }

// grad returns d(ciou)/d(a) scaled by dc, holding alpha constant.
func (s *ciouState) grad(dc float64) [4]float64 {
	a, b := s.a, s.b
	var g [4]float64
	// iou = inter / union, union = w1*h1 + w2*h2 - inter + eps.
	dInter := dc * (1/s.union + s.inter/(s.union*s.union))
	dUnion := -dc * s.inter / (s.union * s.union)
	dw1 := dUnion * s.h1
	dh1 := dUnion * s.w1
	// The reference's clamp_(0) passes the gradient where the input is >= 0.
	if s.iwRaw >= 0 {
		diw := dInter * s.ih
		g[2] += diw * minGrad(a[2], b[2])
		g[0] -= diw * maxGrad(a[0], b[0])
	}
	if s.ihRaw >= 0 {
		dih := dInter * s.iw
		g[3] += dih * minGrad(a[3], b[3])
		g[1] -= dih * maxGrad(a[1], b[1])
	}
	// - rho2 / c2.
	dRho2 := -dc / s.c2
	dC2 := dc * s.rho2 / (s.c2 * s.c2)
	dcw := dC2 * 2 * s.cw
	dch := dC2 * 2 * s.ch
	g[2] += dcw * maxGrad(a[2], b[2])
	g[0] -= dcw * minGrad(a[0], b[0])
	g[3] += dch * maxGrad(a[3], b[3])
	g[1] -= dch * minGrad(a[1], b[1])
	// rho2 = (sx² + sy²) / 4 with sx = b0 + b2 - a0 - a2.
	gx := -dRho2 * s.sx / 2
	gy := -dRho2 * s.sy / 2
	g[0] += gx
	g[2] += gx
	g[1] += gy
	g[3] += gy
	// - v*alpha, v = 4/pi² (atan(w2/h2) - atan(w1/h1))².
	dv := -dc * s.alpha
	k := 4 / (math.Pi * math.Pi) * 2 * s.dtheta
	den := s.w1*s.w1 + s.h1*s.h1
	dw1 += dv * (-k * s.h1 / den)
	dh1 += dv * (k * s.w1 / den)
	g[2] += dw1
	g[0] -= dw1
	g[3] += dh1
	g[1] -= dh1
	return g
}

// ciou32 is the forward of ciou evaluated in float32 with the reference's
// operation order. The assigner raises the CIoU to the 6th power, which
// magnifies rounding differences sixfold, and near-zero CIoUs come from a
// cancellation; following the reference's float32 arithmetic keeps the
// alignment metric within float32 noise of it.
func ciou32(a, b [4]float32) float32 {
	const eps = float32(ciouEps)
	w1, h1 := a[2]-a[0], a[3]-a[1]+eps
	w2, h2 := b[2]-b[0], b[3]-b[1]+eps
	iw := max(min(a[2], b[2])-max(a[0], b[0]), 0)
	ih := max(min(a[3], b[3])-max(a[1], b[1]), 0)
	inter := iw * ih
	union := w1*h1 + w2*h2 - inter + eps
	iou := inter / union
	cw := max(a[2], b[2]) - min(a[0], b[0])
	ch := max(a[3], b[3]) - min(a[1], b[1])
	c2 := cw*cw + ch*ch + eps
	sx := b[0] + b[2] - a[0] - a[2]
	sy := b[1] + b[3] - a[1] - a[3]
	rho2 := (sx*sx + sy*sy) / 4
	dt := float32(math.Atan(float64(w2/h2))) - float32(math.Atan(float64(w1/h1)))
	v := float32(4/(math.Pi*math.Pi)) * (dt * dt)
	alpha := v / (v - iou + float32(1+ciouEps))
	return iou - (rho2/c2 + v*alpha)
}
