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

// im2col lowers one group of one sample (cg channels) to a
// (cg·KH·KW)×(OH·OW) matrix, zero where the window hangs over padding.
func im2col(p backend.Conv, x, col []float32) {
	oh, ow := p.OutH(), p.OutW()
	cg := p.InC / p.Groups
	H, W := p.InH, p.InW
	r := 0
	for c := 0; c < cg; c++ {
		plane := x[c*H*W : (c+1)*H*W]
		for ki := 0; ki < p.KH; ki++ {
			for kj := 0; kj < p.KW; kj++ {
				dst := col[r*oh*ow : (r+1)*oh*ow]
				r++
				for oy := 0; oy < oh; oy++ {
					iy := oy*p.Stride - p.Pad + ki
					d := dst[oy*ow : (oy+1)*ow]
					if iy < 0 || iy >= H {
						zero(d)
						continue
					}
					row := plane[iy*W : (iy+1)*W]
					if p.Stride == 1 {
						// Contiguous run: copy the in-bounds span, zero the rest.
						ix0 := -p.Pad + kj
						for ox := range d {
							ix := ix0 + ox
							if ix < 0 || ix >= W {
								d[ox] = 0
							} else {
								d[ox] = row[ix]
							}
						}
						continue
					}
					for ox := range d {
						ix := ox*p.Stride - p.Pad + kj
						if ix < 0 || ix >= W {
							d[ox] = 0
						} else {
							d[ox] = row[ix]
						}
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
	H, W := p.InH, p.InW
	r := 0
	for c := 0; c < cg; c++ {
		plane := x[c*H*W : (c+1)*H*W]
		for ki := 0; ki < p.KH; ki++ {
			for kj := 0; kj < p.KW; kj++ {
				src := col[r*oh*ow : (r+1)*oh*ow]
				r++
				for oy := 0; oy < oh; oy++ {
					iy := oy*p.Stride - p.Pad + ki
					if iy < 0 || iy >= H {
						continue
					}
					row := plane[iy*W : (iy+1)*W]
					s := src[oy*ow : (oy+1)*ow]
					for ox, v := range s {
						ix := ox*p.Stride - p.Pad + kj
						if ix >= 0 && ix < W {
							row[ix] += v
						}
					}
				}
			}
		}
	}
}

// Depthwise kernels: one (sample, channel) plane per task.

func (be *Backend) dwForward(p backend.Conv, x, w, y []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W := p.InH, p.InW
	kh, kw := p.KH, p.KW
	parallelFor(be.workers(), p.N*p.InC, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			c := nc % p.InC
			xp := x[nc*H*W : (nc+1)*H*W]
			yp := y[nc*oh*ow : (nc+1)*oh*ow]
			wk := w[c*kh*kw : (c+1)*kh*kw]
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					var s float32
					for ki := 0; ki < kh; ki++ {
						iy := oy*p.Stride - p.Pad + ki
						if iy < 0 || iy >= H {
							continue
						}
						for kj := 0; kj < kw; kj++ {
							ix := ox*p.Stride - p.Pad + kj
							if ix < 0 || ix >= W {
								continue
							}
							s += xp[iy*W+ix] * wk[ki*kw+kj]
						}
					}
					yp[oy*ow+ox] = s
				}
			}
		}
	})
}

func (be *Backend) dwBackwardData(p backend.Conv, dy, w, dx []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W := p.InH, p.InW
	kh, kw := p.KH, p.KW
	parallelFor(be.workers(), p.N*p.InC, func(lo, hi int) {
		for nc := lo; nc < hi; nc++ {
			c := nc % p.InC
			dxp := dx[nc*H*W : (nc+1)*H*W]
			dyp := dy[nc*oh*ow : (nc+1)*oh*ow]
			wk := w[c*kh*kw : (c+1)*kh*kw]
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					g := dyp[oy*ow+ox]
					for ki := 0; ki < kh; ki++ {
						iy := oy*p.Stride - p.Pad + ki
						if iy < 0 || iy >= H {
							continue
						}
						for kj := 0; kj < kw; kj++ {
							ix := ox*p.Stride - p.Pad + kj
							if ix < 0 || ix >= W {
								continue
							}
							dxp[iy*W+ix] += g * wk[ki*kw+kj]
						}
					}
				}
			}
		}
	})
}

func (be *Backend) dwBackwardFilter(p backend.Conv, x, dy, dw []float32) {
	oh, ow := p.OutH(), p.OutW()
	H, W := p.InH, p.InW
	kh, kw := p.KH, p.KW
	// One task per channel so each dw slice has a single writer.
	parallelFor(be.workers(), p.InC, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			wk := dw[c*kh*kw : (c+1)*kh*kw]
			for n := 0; n < p.N; n++ {
				nc := n*p.InC + c
				xp := x[nc*H*W : (nc+1)*H*W]
				dyp := dy[nc*oh*ow : (nc+1)*oh*ow]
				for ki := 0; ki < kh; ki++ {
					for kj := 0; kj < kw; kj++ {
						var s float32
						for oy := 0; oy < oh; oy++ {
							iy := oy*p.Stride - p.Pad + ki
							if iy < 0 || iy >= H {
								continue
							}
							for ox := 0; ox < ow; ox++ {
								ix := ox*p.Stride - p.Pad + kj
								if ix < 0 || ix >= W {
									continue
								}
								s += xp[iy*W+ix] * dyp[oy*ow+ox]
							}
						}
						wk[ki*kw+kj] += s
					}
				}
			}
		}
	})
}
