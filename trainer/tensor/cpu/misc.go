package cpu

import (
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// MaxPool2d takes the first maximum in row-major window order, as PyTorch
// does, so ties send the gradient to one input only.
func (be *Kernels) MaxPool2d(p backend.Pool, x, y []float32, arg []int32) {
	oh, ow := p.OutH(), p.OutW()
	H, W := p.H, p.W
	parallelFor(be.workers(), p.N*p.C, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			xp := x[nc*H*W : (nc+1)*H*W]
			yp := y[nc*oh*ow : (nc+1)*oh*ow]
			ap := arg[nc*oh*ow : (nc+1)*oh*ow]
			for oy := 0; oy < oh; oy++ {
				y0 := max(oy*p.Stride-p.Pad, 0)
				y1 := min(oy*p.Stride-p.Pad+p.K, H)
				for ox := 0; ox < ow; ox++ {
					x0 := max(ox*p.Stride-p.Pad, 0)
					x1 := min(ox*p.Stride-p.Pad+p.K, W)
					best := float32(math.Inf(-1))
					bi := int32(-1)
					for iy := y0; iy < y1; iy++ {
						for ix := x0; ix < x1; ix++ {
							v := xp[iy*W+ix]
							if v > best || bi < 0 || v != v {
								best, bi = v, int32(iy*W+ix)
								if v != v {
									break
								}
							}
						}
					}
					yp[oy*ow+ox] = best
					ap[oy*ow+ox] = bi
				}
			}
		}
	})
}

// MaxPool2dBackward routes each output gradient to its recorded winner.
func (be *Kernels) MaxPool2dBackward(p backend.Pool, dy []float32, arg []int32, dx []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W := p.H, p.W
	parallelFor(be.workers(), p.N*p.C, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			dxp := dx[nc*H*W : (nc+1)*H*W]
			for i, a := range arg[nc*oh*ow : (nc+1)*oh*ow] {
				if a >= 0 {
					dxp[a] += dy[nc*oh*ow+i]
				}
			}
		}
	})
}

// Softmax subtracts the maximum before exponentiating so large logits do
// not overflow.
func (be *Kernels) Softmax(outer, n, inner int, x, y []float32) {
	parallelFor(be.workers(), outer*inner, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o, in := t/inner, t%inner
			base := o*n*inner + in
			mx := float32(math.Inf(-1))
			for i := 0; i < n; i++ {
				mx = max(mx, x[base+i*inner])
			}
			var s float64
			for i := 0; i < n; i++ {
				e := float32(math.Exp(float64(x[base+i*inner] - mx)))
				y[base+i*inner] = e
				s += float64(e)
			}
			r := float32(1 / s)
			for i := 0; i < n; i++ {
				y[base+i*inner] *= r
			}
		}
	})
}

// SoftmaxBackward accumulates dx += y·(dy − Σ dy·y).
func (be *Kernels) SoftmaxBackward(outer, n, inner int, y, dy, dx []float32) {
	parallelFor(be.workers(), outer*inner, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o, in := t/inner, t%inner
			base := o*n*inner + in
			var s float64
			for i := 0; i < n; i++ {
				s += float64(dy[base+i*inner]) * float64(y[base+i*inner])
			}
			sf := float32(s)
			for i := 0; i < n; i++ {
				k := base + i*inner
				dx[k] += y[k] * (dy[k] - sf)
			}
		}
	})
}

// Unary writes y = f(x).
func (be *Kernels) Unary(f backend.Unary, x, y []float32) {
	w := be.workers()
	if len(x) < 1<<15 {
		w = 1
	}
	parallelFor(w, len(x), func(lo, hi int) {
		xs, ys := x[lo:hi], y[lo:hi]
		switch f {
		case backend.SiLU:
			sigmoidInto(xs, ys, true)
		case backend.Sigmoid:
			sigmoidInto(xs, ys, false)
		case backend.ReLU:
			for i, v := range xs {
				ys[i] = max(v, 0)
			}
		case backend.Exp:
			for i, v := range xs {
				ys[i] = exp32(v)
			}
		case backend.Log:
			for i, v := range xs {
				ys[i] = float32(math.Log(float64(v)))
			}
		case backend.Abs:
			for i, v := range xs {
				ys[i] = float32(math.Abs(float64(v)))
			}
		case backend.Neg:
			for i, v := range xs {
				ys[i] = -v
			}
		case backend.Sqrt:
			for i, v := range xs {
				ys[i] = float32(math.Sqrt(float64(v)))
			}
		case backend.Square:
			for i, v := range xs {
				ys[i] = v * v
			}
		case backend.Atan:
			for i, v := range xs {
				ys[i] = float32(math.Atan(float64(v)))
			}
		case backend.Tanh:
			for i, v := range xs {
				ys[i] = float32(math.Tanh(float64(v)))
			}
		default:
			panic("cpu: unknown unary function")
		}
	})
}

// UnaryBackward accumulates dx += f'(x)·dy.
func (be *Kernels) UnaryBackward(f backend.Unary, x, y, dy, dx []float32) {
	w := be.workers()
	if len(x) < 1<<15 {
		w = 1
	}
	parallelFor(w, len(x), func(lo, hi int) {
		xs, ys, gs, ds := x[lo:hi], y[lo:hi], dy[lo:hi], dx[lo:hi]
		switch f {
		case backend.SiLU:
			siluBackward(xs, gs, ds)
		case backend.Sigmoid:
			for i, s := range ys {
				ds[i] += gs[i] * s * (1 - s)
			}
		case backend.ReLU:
			for i, v := range xs {
				if v > 0 {
					ds[i] += gs[i]
				}
			}
		case backend.Exp:
			for i, e := range ys {
				ds[i] += gs[i] * e
			}
		case backend.Log:
			for i, v := range xs {
				ds[i] += gs[i] / v
			}
		case backend.Abs:
			for i, v := range xs {
				if v > 0 {
					ds[i] += gs[i]
				} else if v < 0 {
					ds[i] -= gs[i]
				}
			}
		case backend.Neg:
			for i := range xs {
				ds[i] -= gs[i]
			}
		case backend.Sqrt:
			for i, r := range ys {
				ds[i] += gs[i] * 0.5 / r
			}
		case backend.Square:
			for i, v := range xs {
				ds[i] += gs[i] * 2 * v
			}
		case backend.Atan:
			for i, v := range xs {
				ds[i] += gs[i] / (1 + v*v)
			}
		case backend.Tanh:
			for i, t := range ys {
				ds[i] += gs[i] * (1 - t*t)
			}
		default:
			panic("cpu: unknown unary function")
		}
	})
}

func exp32(v float32) float32 { return float32(math.Exp(float64(v))) }

// siluBackwardGo is the portable SiLU gradient loop.
func siluBackwardGo(x, dy, dx []float32) {
	for i, v := range x {
		s := sigmoid32(v)
		dx[i] += dy[i] * s * (1 + v*(1-s))
	}
}

// sigmoidGo is the portable sigmoid (or SiLU) loop.
func sigmoidGo(x, y []float32, silu bool) {
	for i, v := range x {
		s := sigmoid32(v)
		if silu {
			s *= v
		}
		y[i] = s
	}
}

// sigmoid32 evaluates the logistic function without overflow for large |v|.
func sigmoid32(v float32) float32 {
	if v >= 0 {
		return 1 / (1 + exp32(-v))
	}
	e := exp32(v)
	return e / (1 + e)
}
