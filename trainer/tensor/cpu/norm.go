package cpu

import "math"

// BatchNormTrain computes per-channel batch statistics in float64 (two
// passes: mean, then centred sum of squares) so large N·H·W planes do not
// lose precision, and normalises x with them.
func (be *Backend) BatchNormTrain(n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased []float32) {
	cnt := n * hw
	parallelFor(be.workers(), c, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			var s float64
			for i := 0; i < n; i++ {
				for _, v := range x[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					s += float64(v)
				}
			}
			m := s / float64(cnt)
			var ss float64
			for i := 0; i < n; i++ {
				for _, v := range x[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					d := float64(v) - m
					ss += d * d
				}
			}
			vb := ss / float64(cnt)
			is := 1 / math.Sqrt(vb+float64(eps))
			mean[ch] = float32(m)
			invstd[ch] = float32(is)
			if varUnbiased != nil {
				if cnt > 1 {
					varUnbiased[ch] = float32(ss / float64(cnt-1))
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
			sc := g * float32(is)
			sh := b - float32(m)*sc
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				ys := y[o : o+hw]
				for j, v := range x[o : o+hw] {
					ys[j] = v*sc + sh
				}
			}
		}
	})
}

// ChannelAffine writes y = x·scale[c] + shift[c].
func (be *Backend) ChannelAffine(n, c, hw int, x, scale, shift, y []float32) {
	parallelFor(be.workers(), n*c, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			ch := nc % c
			sc, sh := scale[ch], shift[ch]
			ys := y[nc*hw : (nc+1)*hw]
			for j, v := range x[nc*hw : (nc+1)*hw] {
				ys[j] = v*sc + sh
			}
		}
	})
}

// BatchNormBackward uses the standard closed form
//
//	dx = gamma·invstd·(dy − mean(dy) − xhat·mean(dy·xhat))
//
// with the two channel sums accumulated in float64.
func (be *Backend) BatchNormBackward(n, c, hw int, x, dy, mean, invstd, gamma, dx, dgamma, dbeta []float32) {
	cnt := float64(n * hw)
	parallelFor(be.workers(), c, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			m, is := mean[ch], invstd[ch]
			var sdy, sdyx float64
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				d := dy[o : o+hw]
				for j, v := range x[o : o+hw] {
					sdy += float64(d[j])
					sdyx += float64(d[j]) * float64((v-m)*is)
				}
			}
			if dgamma != nil {
				dgamma[ch] += float32(sdyx)
			}
			if dbeta != nil {
				dbeta[ch] += float32(sdy)
			}
			if dx == nil {
				continue
			}
			g := float32(1)
			if gamma != nil {
				g = gamma[ch]
			}
			k := g * is
			mdy := float32(sdy / cnt)
			mdyx := float32(sdyx / cnt)
			for i := 0; i < n; i++ {
				o := (i*c + ch) * hw
				d := dy[o : o+hw]
				dxs := dx[o : o+hw]
				for j, v := range x[o : o+hw] {
					xh := (v - m) * is
					dxs[j] += k * (d[j] - mdy - xh*mdyx)
				}
			}
		}
	})
}
