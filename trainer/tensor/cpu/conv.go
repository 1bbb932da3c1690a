package cpu

import "github.com/segpipe/segpipe/trainer/tensor/backend"

// Convolution strategy: depthwise filters (one input channel per group
// and one output per group) run a direct loop; 1×1 stride-1 unpadded
// filters multiply the input directly; everything else lowers each
// (sample, group) to im2col + GEMM. Samples run in parallel with a
// single-threaded GEMM each when the batch can fill the workers;
// otherwise samples run in turn and the GEMM itself goes parallel.

func isDepthwise(p backend.Conv) bool {
	return p.Groups == p.InC && p.Groups == p.OutC && p.Groups > 1
}

func isPointwise(p backend.Conv) bool {
	return p.KH == 1 && p.KW == 1 && p.Stride == 1 && p.Pad == 0
}

// Conv2d writes y = conv(x, w).
func (be *Backend) Conv2d(p backend.Conv, x, w, y []float32) {
	p = p.Norm()
	if isDepthwise(p) {
		be.dwForward(p, x, w, y)
		return
	}
	oh, ow := p.OutH(), p.OutW()
	cg, og := p.InC/p.Groups, p.OutC/p.Groups
	kk := cg * p.KH * p.KW
	L := oh * ow
	inner, outer := be.split(p.N)
	parallelFor(outer, p.N, func(lo, hi int) {
		var col []float32
		if !isPointwise(p) {
			col = getBuf(kk * L)
			defer putBuf(col)
		}
		for n := lo; n < hi; n++ {
			for g := 0; g < p.Groups; g++ {
				xs := x[(n*p.InC+g*cg)*p.InH*p.InW:]
				src := xs
				if col != nil {
					im2col(p, xs, col)
					src = col
				}
				be.gemmWith(inner, backend.Gemm{M: og, N: L, K: kk, Alpha: 1},
					w[g*og*kk:], src, y[(n*p.OutC+g*og)*L:])
			}
		}
	})
}

// Conv2dBackwardData accumulates dx += W^T·dy scattered back through col2im.
func (be *Backend) Conv2dBackwardData(p backend.Conv, dy, w, dx []float32) {
	p = p.Norm()
	if isDepthwise(p) {
		be.dwBackwardData(p, dy, w, dx)
		return
	}
	oh, ow := p.OutH(), p.OutW()
	cg, og := p.InC/p.Groups, p.OutC/p.Groups
	kk := cg * p.KH * p.KW
	L := oh * ow
	inner, outer := be.split(p.N)
	parallelFor(outer, p.N, func(lo, hi int) {
		var col []float32
		if !isPointwise(p) {
			col = getBuf(kk * L)
			defer putBuf(col)
		}
		for n := lo; n < hi; n++ {
			for g := 0; g < p.Groups; g++ {
				dxs := dx[(n*p.InC+g*cg)*p.InH*p.InW:]
				if col == nil {
					be.gemmWith(inner, backend.Gemm{TransA: true, M: kk, N: L, K: og, Alpha: 1, Beta: 1},
						w[g*og*kk:], dy[(n*p.OutC+g*og)*L:], dxs)
					continue
				}
				be.gemmWith(inner, backend.Gemm{TransA: true, M: kk, N: L, K: og, Alpha: 1},
					w[g*og*kk:], dy[(n*p.OutC+g*og)*L:], col)
				col2im(p, col, dxs)
			}
		}
	})
}

// Conv2dBackwardFilter accumulates dw += dy·col^T. With parallel samples
// each worker sums into a private filter gradient, reduced at the end in a
// fixed order so results do not depend on scheduling.
func (be *Backend) Conv2dBackwardFilter(p backend.Conv, x, dy, dw []float32) {
	p = p.Norm()
	if isDepthwise(p) {
		be.dwBackwardFilter(p, x, dy, dw)
		return
	}
	oh, ow := p.OutH(), p.OutW()
	cg, og := p.InC/p.Groups, p.OutC/p.Groups
	kk := cg * p.KH * p.KW
	L := oh * ow
	inner, outer := be.split(p.N)
	nw := min(outer, p.N)
	wsz := p.OutC * kk
	parts := make([][]float32, nw)
	parallelFor(nw, nw, func(lo, hi int) {
		for wi := lo; wi < hi; wi++ {
			n0, n1 := wi*p.N/nw, (wi+1)*p.N/nw
			acc := dw
			if nw > 1 {
				acc = getBuf(wsz)
				zero(acc)
				parts[wi] = acc
			}
			var col []float32
			if !isPointwise(p) {
				col = getBuf(kk * L)
			}
			for n := n0; n < n1; n++ {
				for g := 0; g < p.Groups; g++ {
					xs := x[(n*p.InC+g*cg)*p.InH*p.InW:]
					src := xs
					if col != nil {
						im2col(p, xs, col)
						src = col
					}
					be.gemmWith(inner, backend.Gemm{TransB: true, M: og, N: kk, K: L, Alpha: 1, Beta: 1},
						dy[(n*p.OutC+g*og)*L:], src, acc[g*og*kk:])
				}
			}
			if col != nil {
				putBuf(col)
			}
		}
	})
	if nw > 1 {
		for _, part := range parts {
			for i, v := range part[:wsz] {
				dw[i] += v
			}
			putBuf(part)
		}
	}
}

// split decides how a batch of n samples shares the workers: outer
// goroutines across samples, each running GEMMs with inner workers.
func (be *Backend) split(n int) (inner, outer int) {
	w := be.workers()
	if n >= w {
		return 1, w
	}
	return w, 1
}

func (be *Backend) gemmWith(workers int, g backend.Gemm, a, b, c []float32) {
	sub := Backend{Workers: workers}
	sub.Sgemm(g, a, b, c)
}

// validRange returns the output columns [lo, hi) whose input column
// ox·stride − pad + kj falls inside [0, w).
func validRange(ow, w, stride, pad, kj int) (lo, hi int) {
	off := kj - pad
	lo = 0
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	hi = 0
	if w-1-off >= 0 {
		hi = (w-1-off)/stride + 1
	}
	lo, hi = min(lo, ow), min(hi, ow)
	if hi < lo {
		hi = lo
	}
	return lo, hi
}

// im2col lowers one group of one sample (cg channels) to a
// (cg·KH·KW)×(OH·OW) matrix, zero where the window hangs over padding.
// The valid span of every row is computed once, so the inner loops are
// plain copies (stride 1) or strided gathers without bounds tests.
func im2col(p backend.Conv, x, col []float32) {
	oh, ow := p.OutH(), p.OutW()
	cg := p.InC / p.Groups
	H, W, S := p.InH, p.InW, p.Stride
	r := 0
	for c := 0; c < cg; c++ {
		plane := x[c*H*W : (c+1)*H*W]
		for ki := 0; ki < p.KH; ki++ {
			for kj := 0; kj < p.KW; kj++ {
				dst := col[r*oh*ow : (r+1)*oh*ow]
				r++
				lo, hi := validRange(ow, W, S, p.Pad, kj)
				for oy := 0; oy < oh; oy++ {
					iy := oy*S - p.Pad + ki
					d := dst[oy*ow : (oy+1)*ow]
					if iy < 0 || iy >= H || lo == hi {
						zero(d)
						continue
					}
					zero(d[:lo])
					zero(d[hi:])
					ix0 := lo*S - p.Pad + kj
					row := plane[iy*W:]
					if S == 1 {
						copy(d[lo:hi], row[ix0:ix0+hi-lo])
						continue
					}
					seg := d[lo:hi]
					src := row[ix0 : ix0+(len(seg)-1)*S+1]
					for i := range seg {
						seg[i] = src[i*S]
					}
				}
			}
		}
	}
}

// col2im is im2col's adjoint: it adds every column entry back onto the
// input position it was copied from.
func col2im(p backend.Conv, col, x []float32) {
	oh, ow := p.OutH(), p.OutW()
	cg := p.InC / p.Groups
	H, W, S := p.InH, p.InW, p.Stride
	r := 0
	for c := 0; c < cg; c++ {
		plane := x[c*H*W : (c+1)*H*W]
		for ki := 0; ki < p.KH; ki++ {
			for kj := 0; kj < p.KW; kj++ {
				src := col[r*oh*ow : (r+1)*oh*ow]
				r++
				lo, hi := validRange(ow, W, S, p.Pad, kj)
				if lo == hi {
					continue
				}
				for oy := 0; oy < oh; oy++ {
					iy := oy*S - p.Pad + ki
					if iy < 0 || iy >= H {
						continue
					}
					ix0 := lo*S - p.Pad + kj
					s := src[oy*ow+lo : oy*ow+hi]
					row := plane[iy*W+ix0 : iy*W+ix0+(len(s)-1)*S+1]
					if S == 1 {
						row = row[:len(s)]
						for i, v := range s {
							row[i] += v
						}
						continue
					}
					for i, v := range s {
						row[i*S] += v
					}
				}
			}
		}
	}
}

// Depthwise kernels: one (sample, channel) plane per task, computed as
// one shifted row update per kernel tap so the inner loops are long
// unit-stride (or fixed-stride) runs without bounds tests.

func (be *Backend) dwForward(p backend.Conv, x, w, y []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W, S := p.InH, p.InW, p.Stride
	kh, kw := p.KH, p.KW
	parallelFor(be.workers(), p.N*p.InC, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			c := nc % p.InC
			xp := x[nc*H*W : (nc+1)*H*W]
			yp := y[nc*oh*ow : (nc+1)*oh*ow]
			wk := w[c*kh*kw : (c+1)*kh*kw]
			zero(yp)
			for kj := 0; kj < kw; kj++ {
				l, h := validRange(ow, W, S, p.Pad, kj)
				if l == h {
					continue
				}
				ix0 := l*S - p.Pad + kj
				for ki := 0; ki < kh; ki++ {
					wv := wk[ki*kw+kj]
					for oy := 0; oy < oh; oy++ {
						iy := oy*S - p.Pad + ki
						if iy < 0 || iy >= H {
							continue
						}
						d := yp[oy*ow+l : oy*ow+h]
						src := xp[iy*W+ix0 : iy*W+ix0+(len(d)-1)*S+1]
						if S == 1 {
							axpy(wv, src[:len(d)], d)
							continue
						}
						for i := range d {
							d[i] += wv * src[i*S]
						}
					}
				}
			}
		}
	})
}

func (be *Backend) dwBackwardData(p backend.Conv, dy, w, dx []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W, S := p.InH, p.InW, p.Stride
	kh, kw := p.KH, p.KW
	parallelFor(be.workers(), p.N*p.InC, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			c := nc % p.InC
			dxp := dx[nc*H*W : (nc+1)*H*W]
			dyp := dy[nc*oh*ow : (nc+1)*oh*ow]
			wk := w[c*kh*kw : (c+1)*kh*kw]
			for kj := 0; kj < kw; kj++ {
				l, h := validRange(ow, W, S, p.Pad, kj)
				if l == h {
					continue
				}
				ix0 := l*S - p.Pad + kj
				for ki := 0; ki < kh; ki++ {
					wv := wk[ki*kw+kj]
					for oy := 0; oy < oh; oy++ {
						iy := oy*S - p.Pad + ki
						if iy < 0 || iy >= H {
							continue
						}
						g := dyp[oy*ow+l : oy*ow+h]
						d := dxp[iy*W+ix0 : iy*W+ix0+(len(g)-1)*S+1]
						if S == 1 {
							axpy(wv, g, d[:len(g)])
							continue
						}
						for i, v := range g {
							d[i*S] += wv * v
						}
					}
				}
			}
		}
	})
}

func (be *Backend) dwBackwardFilter(p backend.Conv, x, dy, dw []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W, S := p.InH, p.InW, p.Stride
	kh, kw := p.KH, p.KW
	// One task per channel so each dw slice has a single writer.
	parallelFor(be.workers(), p.InC, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			wk := dw[c*kh*kw : (c+1)*kh*kw]
			for n := 0; n < p.N; n++ {
				nc := n*p.InC + c
				xp := x[nc*H*W : (nc+1)*H*W]
				dyp := dy[nc*oh*ow : (nc+1)*oh*ow]
				for kj := 0; kj < kw; kj++ {
					l, h := validRange(ow, W, S, p.Pad, kj)
					if l == h {
						continue
					}
					ix0 := l*S - p.Pad + kj
					for ki := 0; ki < kh; ki++ {
						var s float32
						for oy := 0; oy < oh; oy++ {
							iy := oy*S - p.Pad + ki
							if iy < 0 || iy >= H {
								continue
							}
							g := dyp[oy*ow+l : oy*ow+h]
							src := xp[iy*W+ix0 : iy*W+ix0+(len(g)-1)*S+1]
							if S == 1 {
								s += dot(g, src[:len(g)])
								continue
							}
							for i, v := range g {
								s += v * src[i*S]
							}
						}
						wk[ki*kw+kj] += s
					}
				}
			}
		}
	})
}

// axpy adds a·x to y (len(x) == len(y)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xx := x[i : i+4 : i+4]
		yy := y[i : i+4 : i+4]
		yy[0] += a * xx[0]
		yy[1] += a * xx[1]
		yy[2] += a * xx[2]
		yy[3] += a * xx[3]
	}
	for ; i < len(x); i++ {
		y[i] += a * x[i]
	}
}

// dot returns Σ x·y with four partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		xx := x[i : i+4 : i+4]
		yy := y[i : i+4 : i+4]
		s0 += xx[0] * yy[0]
		s1 += xx[1] * yy[1]
		s2 += xx[2] * yy[2]
		s3 += xx[3] * yy[3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}
