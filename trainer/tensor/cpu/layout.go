package cpu

import (
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// workersFor is workers() for a kernel touching work elements, or 1 below
// MinParallel, where starting goroutines costs more than the loop.
func (be *Kernels) workersFor(work int) int {
	lim := 1 << 16
	if be != nil && be.MinParallel > 0 {
		lim = be.MinParallel
	}
	if work < lim {
		return 1
	}
	return be.workers()
}

// Fill sets every element of x to v.
func (be *Kernels) Fill(x []float32, v float32) {
	parallelFor(be.workersFor(len(x)), len(x), func(lo, hi int) {
		if v == 0 {
			clear(x[lo:hi])
			return
		}
		for i := lo; i < hi; i++ {
			x[i] = v
		}
	})
}

// Axpby writes y = alpha·x + beta·y; beta 0 leaves y unread, beta 1 adds.
func (be *Kernels) Axpby(alpha float32, x []float32, beta float32, y []float32) {
	y = y[:len(x)]
	parallelFor(be.workersFor(len(x)), len(x), func(lo, hi int) {
		xs, ys := x[lo:hi], y[lo:hi]
		switch {
		case beta == 0:
			for i, v := range xs {
				ys[i] = v * alpha
			}
		case beta == 1 && alpha == 1:
			for i, v := range xs {
				ys[i] += v
			}
		case beta == 1:
			for i, v := range xs {
				ys[i] += v * alpha
			}
		default:
			for i, v := range xs {
				ys[i] = alpha*v + beta*ys[i]
			}
		}
	})
}

// Copy splits the walk along axis 0 (see backend.Strided for why that is
// safe when accumulating) and moves one last-axis row at a time.
func (be *Kernels) Copy(s backend.Strided, src, dst []float32) {
	nd := len(s.Shape)
	total := 1
	for _, d := range s.Shape {
		total *= d
	}
	if total == 0 {
		return
	}
	if nd == 0 {
		copyRow(src, dst, 1, 1, 1, s.Accumulate)
		return
	}
	if nd == 1 {
		ss, ds := s.Src[0], s.Dst[0]
		parallelFor(be.workersFor(total), s.Shape[0], func(lo, hi int) {
			copyRow(src[lo*ss:], dst[lo*ds:], hi-lo, ss, ds, s.Accumulate)
		})
		return
	}
	parallelFor(be.workersFor(total), s.Shape[0], func(lo, hi int) {
		walkStrided(s, src, dst, lo, hi)
	})
}

// walkStrided runs the rows of axis-0 indices [lo, hi) in row-major order.
func walkStrided(s backend.Strided, src, dst []float32, lo, hi int) {
	last := len(s.Shape) - 1
	n, ss, ds := s.Shape[last], s.Src[last], s.Dst[last]
	var idxBuf [8]int
	idx := idxBuf[:0]
	if last > len(idxBuf) {
		idx = make([]int, last)
	} else {
		idx = idxBuf[:last]
	}
	for a0 := lo; a0 < hi; a0++ {
		so, do := a0*s.Src[0], a0*s.Dst[0]
		clear(idx)
		for {
			copyRow(src[so:], dst[do:], n, ss, ds, s.Accumulate)
			k := last - 1
			for ; k >= 1; k-- {
				idx[k]++
				so += s.Src[k]
				do += s.Dst[k]
				if idx[k] < s.Shape[k] {
					break
				}
				so -= s.Src[k] * s.Shape[k]
				do -= s.Dst[k] * s.Shape[k]
				idx[k] = 0
			}
			if k < 1 {
				break
			}
		}
	}
}

// copyRow moves n elements at strides ss (source) and ds (destination).
func copyRow(src, dst []float32, n, ss, ds int, acc bool) {
	switch {
	case ss == 1 && ds == 1 && acc:
		for i, v := range src[:n] {
			dst[i] += v
		}
	case ss == 1 && ds == 1:
		copy(dst[:n], src[:n])
	case acc:
		for i := 0; i < n; i++ {
			dst[i*ds] += src[i*ss]
		}
	default:
		for i := 0; i < n; i++ {
			dst[i*ds] = src[i*ss]
		}
	}
}

// BytesToFloat widens bytes to float32 times scale.
func (be *Kernels) BytesToFloat(scale float32, src []byte, dst []float32) {
	src = src[:len(dst)]
	parallelFor(be.workersFor(len(dst)), len(dst), func(lo, hi int) {
		for i, v := range src[lo:hi] {
			dst[lo+i] = float32(v) * scale
		}
	})
}

// ChannelSum gives each channel one worker and one float64 accumulator, so
// the sum's order is fixed.
func (be *Kernels) ChannelSum(n, c, hw int, x, dst []float32) {
	parallelFor(be.workersFor(n*c*hw), c, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			var s float64
			for i := 0; i < n; i++ {
				for _, v := range x[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					s += float64(v)
				}
			}
			dst[ch] += float32(s)
		}
	})
}

// UpsampleNearest repeats each source row Factor times per output row.
func (be *Kernels) UpsampleNearest(p backend.Upsample, x, y []float32) {
	h, w, f := p.H, p.W, p.Factor
	H, W := h*f, w*f
	parallelFor(be.workersFor(p.Planes*H*W), p.Planes, func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			src := x[pl*h*w : (pl+1)*h*w]
			dst := y[pl*H*W : (pl+1)*H*W]
			for oy := 0; oy < H; oy++ {
				row := src[(oy/f)*w : (oy/f+1)*w]
				d := dst[oy*W : (oy+1)*W]
				for ox := range d {
					d[ox] = row[ox/f]
				}
			}
		}
	})
}

// UpsampleNearestBackward adds the output rows in order, one plane per
// worker.
func (be *Kernels) UpsampleNearestBackward(p backend.Upsample, dy, dx []float32) {
	h, w, f := p.H, p.W, p.Factor
	H, W := h*f, w*f
	parallelFor(be.workersFor(p.Planes*H*W), p.Planes, func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			g := dx[pl*h*w : (pl+1)*h*w]
			gy := dy[pl*H*W : (pl+1)*H*W]
			for oy := 0; oy < H; oy++ {
				row := g[(oy/f)*w : (oy/f+1)*w]
				for ox, v := range gy[oy*W : (oy+1)*W] {
					row[ox/f] += v
				}
			}
		}
	})
}

// bnEvalScale writes invstd, scale = gamma·invstd and shift = beta −
// mean·scale per channel, in float64 for the square root as PyTorch does.
func bnEvalScale(c int, eps float32, gamma, beta, mean, variance, invstd, scale, shift []float32) {
	for i := 0; i < c; i++ {
		invstd[i] = float32(1 / math.Sqrt(float64(variance[i])+float64(eps)))
		g, b := float32(1), float32(0)
		if gamma != nil {
			g = gamma[i]
		}
		if beta != nil {
			b = beta[i]
		}
		scale[i] = g * invstd[i]
		if shift != nil {
			shift[i] = b - mean[i]*scale[i]
		}
	}
}

// BatchNormEval folds the running statistics into one affine per channel.
func (be *Kernels) BatchNormEval(n, c, hw int, eps float32, x, gamma, beta, mean, variance, y []float32) {
	tmp := getBuf(3 * c)
	invstd, scale, shift := tmp[:c], tmp[c:2*c], tmp[2*c:]
	bnEvalScale(c, eps, gamma, beta, mean, variance, invstd, scale, shift)
	be.ChannelAffine(n, c, hw, x, scale, shift, y)
	putBuf(tmp)
}

// BatchNormEvalBackward sums the parameter gradients per plane in float32,
// planes in index order.
func (be *Kernels) BatchNormEvalBackward(n, c, hw int, eps float32, x, dy, gamma, mean, variance, dx, dgamma, dbeta []float32) {
	tmp := getBuf(2 * c)
	invstd, scale := tmp[:c], tmp[c:]
	bnEvalScale(c, eps, gamma, nil, mean, variance, invstd, scale, nil)
	for i := 0; i < n*c; i++ {
		ch := i % c
		g := dy[i*hw : (i+1)*hw]
		xs := x[i*hw : (i+1)*hw]
		var sdy, sdyx float32
		for j, v := range g {
			sdy += v
			sdyx += v * (xs[j] - mean[ch]) * invstd[ch]
		}
		if dgamma != nil {
			dgamma[ch] += sdyx
		}
		if dbeta != nil {
			dbeta[ch] += sdy
		}
		if dx != nil {
			k := scale[ch]
			gxs := dx[i*hw : (i+1)*hw]
			for j, v := range g {
				gxs[j] += v * k
			}
		}
	}
	putBuf(tmp)
}
