package cpu

import "math"

// Batch-norm statistics are accumulated in float64 (as PyTorch's CPU
// kernels do) with four independent partial sums per quantity, so the
// loops are not serialised on one floating-point add chain.

// sumShiftGo returns Σ(x−k) and Σ(x−k)² in float64. Shifting by a value from
// the channel keeps the one-pass variance free of cancellation when the
// mean is large next to the spread.
func sumShiftGo(x []float32, k float64) (s, ss float64) {
	var s0, s1, s2, s3, q0, q1, q2, q3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		d0, d1, d2, d3 := float64(v[0])-k, float64(v[1])-k, float64(v[2])-k, float64(v[3])-k
		s0 += d0
		s1 += d1
		s2 += d2
		s3 += d3
		q0 += d0 * d0
		q1 += d1 * d1
		q2 += d2 * d2
		q3 += d3 * d3
	}
	for ; i < len(x); i++ {
		d := float64(x[i]) - k
		s0 += d
		q0 += d * d
	}
	return (s0 + s1) + (s2 + s3), (q0 + q1) + (q2 + q3)
}

// sumDyDyxGo returns Σdy and Σdy·(x−k) in float64.
func sumDyDyxGo(dy, x []float32, k float64) (s, sx float64) {
	x = x[:len(dy)]
	var s0, s1, s2, s3, p0, p1, p2, p3 float64
	i := 0
	for ; i+4 <= len(dy); i += 4 {
		g := dy[i : i+4 : i+4]
		v := x[i : i+4 : i+4]
		g0, g1, g2, g3 := float64(g[0]), float64(g[1]), float64(g[2]), float64(g[3])
		s0 += g0
		s1 += g1
		s2 += g2
		s3 += g3
		p0 += g0 * (float64(v[0]) - k)
		p1 += g1 * (float64(v[1]) - k)
		p2 += g2 * (float64(v[2]) - k)
		p3 += g3 * (float64(v[3]) - k)
	}
	for ; i < len(dy); i++ {
		g := float64(dy[i])
		s0 += g
		p0 += g * (float64(x[i]) - k)
	}
	return (s0 + s1) + (s2 + s3), (p0 + p1) + (p2 + p3)
}

// BatchNormTrain computes per-channel batch statistics in float64 in one
// pass over the data and normalises x with them.
func (be *Kernels) BatchNormTrain(n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased []float32) {
	cnt := n * hw
	parallelFor(be.workers(), c, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			if cnt == 0 {
				continue
			}
			k := float64(x[ch*hw])
			var s, ss float64
			for i := 0; i < n; i++ {
				a, b := sumShift(x[(i*c+ch)*hw:(i*c+ch+1)*hw], k)
				s += a
				ss += b
			}
			d := s / float64(cnt)
			m := k + d
			sq := max(ss-d*s, 0) // Σ(x−mean)² = Σ(x−k)² − (Σ(x−k))²/cnt
			vb := sq / float64(cnt)
			is := 1 / math.Sqrt(vb+float64(eps))
			mean[ch] = float32(m)
			invstd[ch] = float32(is)
			if varUnbiased != nil {
				if cnt > 1 {
					varUnbiased[ch] = float32(sq / float64(cnt-1))
				} else {
					varUnbiased[ch] = float32(math.NaN())
				}
			}
			g, b := float32(1), float32(0)
			if gamma != nil {
				g = gamma[ch]
			}
			if beta != nil {
				b = beta[ch]
			}
			sc := float32(float64(g) * is)
			sh := float32(float64(b) - m*float64(g)*is)
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				affine(x[o:o+hw], y[o:o+hw], sc, sh)
			}
		}
	})
}

// ChannelAffine writes y = x·scale[c] + shift[c]; a nil scale is a bias
// add, split like any elementwise loop.
func (be *Kernels) ChannelAffine(n, c, hw int, x, scale, shift, y []float32) {
	if scale == nil {
		parallelFor(be.workersFor(n*c*hw), n*c, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v := shift[i%c]
				xs, ys := x[i*hw:(i+1)*hw], y[i*hw:(i+1)*hw]
				for j, u := range xs {
					ys[j] = u + v
				}
			}
		})
		return
	}
	parallelFor(be.workers(), n*c, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			ch := nc % c
			affine(x[nc*hw:(nc+1)*hw], y[nc*hw:(nc+1)*hw], scale[ch], shift[ch])
		}
	})
}

// BatchNormBackward uses the standard closed form
//
//	dx = gamma·invstd·(dy − mean(dy) − xhat·mean(dy·xhat))
//
// with the two channel sums accumulated in float64.
func (be *Kernels) BatchNormBackward(n, c, hw int, x, dy, mean, invstd, gamma, dx, dgamma, dbeta []float32) {
	cnt := float64(n * hw)
	parallelFor(be.workers(), c, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			m, is := mean[ch], invstd[ch]
			var sdy, sdyx float64
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				a, b := sumDyDyx(dy[o:o+hw], x[o:o+hw], float64(m))
				sdy += a
				sdyx += b
			}
			sdyx *= float64(is) // Σ dy·xhat
			if dgamma != nil {
				dgamma[ch] += float32(sdyx)
			}
			if dbeta != nil {
				dbeta[ch] += float32(sdy)
			}
			if dx == nil || cnt == 0 {
				continue
			}
			g := float32(1)
			if gamma != nil {
				g = gamma[ch]
			}
			// dx = k·(dy − mean(dy)) − k·is·mean(dy·xhat)·(x − m). Centring x
			// before scaling keeps precision when |mean| ≫ std.
			k := float64(g) * float64(is)
			kd := float32(k)
			mdy := float32(sdy / cnt)
			kx := float32(k * float64(is) * sdyx / cnt)
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				bnBack(dy[o:o+hw], x[o:o+hw], dx[o:o+hw], kd, mdy, kx, m)
			}
		}
	})
}

// affineGo writes y = x·a + b.
func affineGo(x, y []float32, a, b float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = v*a + b
	}
}

// bnBackGo accumulates dx += kd·(dy − mdy) − kx·(x − m).
func bnBackGo(dy, x, dx []float32, kd, mdy, kx, m float32) {
	x, dx = x[:len(dy)], dx[:len(dy)]
	for i, g := range dy {
		dx[i] += kd*(g-mdy) - kx*(x[i]-m)
	}
}
