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
func (be *Kernels) Conv2d(p backend.Conv, x, w, y []float32) {
	p = p.Norm()
	if isDepthwise(p) {
		be.dwForward(p, x, w, y)
		return
	}
	be.convGemm(p, x, w, y, 0)
}

// convGemm computes y = conv(x, w) + beta·y by implicit-im2col GEMM.
func (be *Kernels) convGemm(p backend.Conv, x, w, y []float32, beta float32) {
	oh, ow := p.OutH(), p.OutW()
	cg, og := p.InC/p.Groups, p.OutC/p.Groups
	kk := cg * p.KH * p.KW
	L := oh * ow
	inner, outer := be.split(p.N)
	parallelFor(outer, p.N, func(lo, hi int) {
		sub := &Kernels{Workers: inner}
		for n := lo; n < hi; n++ {
			for g := 0; g < p.Groups; g++ {
				xs := x[(n*p.InC+g*cg)*p.InH*p.InW:]
				gm := backend.Gemm{M: og, N: L, K: kk, Alpha: 1, Beta: beta}
				if isPointwise(p) {
					sub.Sgemm(gm, w[g*og*kk:], xs, y[(n*p.OutC+g*og)*L:])
					continue
				}
				// Implicit im2col: B's panels are gathered straight from x.
				sub.sgemmPacked(gm, w[g*og*kk:], func(bp []float32, j0, p0, nc, kc, NR int) {
					var row [gemmNC]float32
					for q := 0; q < kc; q++ {
						colRow(p, xs, p0+q, j0, row[:nc])
						scatterRow(bp, row[:nc], q, kc, NR)
					}
				}, y[(n*p.OutC+g*og)*L:])
			}
		}
	})
}

// scatterRow stores row (columns j0.. of one k) into the NR-wide slivers of
// a packed panel at depth q, zero-padding the last sliver.
func scatterRow(bp, row []float32, q, kc, NR int) {
	nc := len(row)
	full := nc / NR * NR
	jr := 0
	switch NR {
	case 16:
		for ; jr < full; jr += 16 {
			o := jr*kc + q*16
			*(*[16]float32)(bp[o : o+16]) = [16]float32(row[jr : jr+16])
		}
	case 32:
		for ; jr < full; jr += 32 {
			o := jr*kc + q*32
			*(*[32]float32)(bp[o : o+32]) = [32]float32(row[jr : jr+32])
		}
	default:
		for ; jr < full; jr += NR {
			o := jr*kc + q*NR
			copy(bp[o:o+NR], row[jr:jr+NR])
		}
	}
	if jr < nc {
		o := jr*kc + q*NR
		d := bp[o : o+NR]
		clear(d[copy(d, row[jr:]):])
	}
}

// colRow writes entries [l0, l0+len(dst)) of im2col row r (channel, tap)
// of one group of one sample: the input value under tap r for each output
// position, 0 over padding.
func colRow(p backend.Conv, x []float32, r, l0 int, dst []float32) {
	oh, ow := p.OutH(), p.OutW()
	_ = oh
	H, W, S := p.InH, p.InW, p.Stride
	kk := p.KH * p.KW
	c, t := r/kk, r%kk
	ki, kj := t/p.KW, t%p.KW
	plane := x[c*H*W : (c+1)*H*W]
	lo, hi := validRange(ow, W, S, p.Pad, kj)
	oy, ox := l0/ow, l0%ow
	for len(dst) > 0 {
		seg := dst[:min(len(dst), ow-ox)]
		dst = dst[len(seg):]
		iy := oy*S - p.Pad + ki
		if iy < 0 || iy >= H || lo >= hi {
			clear(seg)
		} else {
			// seg covers output columns [ox, ox+len(seg)).
			a, b := max(lo, ox), min(hi, ox+len(seg))
			if a >= b {
				clear(seg)
			} else {
				clear(seg[:a-ox])
				clear(seg[b-ox:])
				ix0 := a*S - p.Pad + kj
				d := seg[a-ox : b-ox]
				row := plane[iy*W:]
				if S == 1 {
					copy(d, row[ix0:ix0+len(d)])
				} else {
					src := row[ix0 : ix0+(len(d)-1)*S+1]
					for i := range d {
						d[i] = src[i*S]
					}
				}
			}
		}
		oy, ox = oy+1, 0
	}
}

// Conv2dBackwardData accumulates dx += W^T·dy scattered back through
// col2im. At stride 1 it is instead a forward convolution of dy with the
// flipped, in/out-transposed filter ("full" padding KH−1−Pad), which runs
// as an implicit GEMM and needs no column buffer.
func (be *Kernels) Conv2dBackwardData(p backend.Conv, dy, w, dx []float32) {
	p = p.Norm()
	if isDepthwise(p) {
		be.dwBackwardData(p, dy, w, dx)
		return
	}
	if p.Stride == 1 && p.KH == p.KW && p.Pad <= p.KH-1 && !isPointwise(p) {
		cg, og := p.InC/p.Groups, p.OutC/p.Groups
		kh, kw := p.KH, p.KW
		wt := getBuf(len(w[:p.OutC*cg*kh*kw]))
		for g := 0; g < p.Groups; g++ {
			for o := 0; o < og; o++ {
				for c := 0; c < cg; c++ {
					src := w[(((g*og+o)*cg)+c)*kh*kw:]
					dst := wt[(((g*cg+c)*og)+o)*kh*kw:]
					for i := 0; i < kh*kw; i++ {
						dst[kh*kw-1-i] = src[i]
					}
				}
			}
		}
		q := backend.Conv{N: p.N, InC: p.OutC, InH: p.OutH(), InW: p.OutW(), OutC: p.InC,
			KH: kh, KW: kw, Stride: 1, Pad: kh - 1 - p.Pad, Groups: p.Groups}
		be.convGemm(q, dy, wt, dx, 1)
		putBuf(wt)
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
func (be *Kernels) Conv2dBackwardFilter(p backend.Conv, x, dy, dw []float32) {
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
			sub := &Kernels{Workers: inner}
			for n := n0; n < n1; n++ {
				for g := 0; g < p.Groups; g++ {
					xs := x[(n*p.InC+g*cg)*p.InH*p.InW:]
					gm := backend.Gemm{TransB: true, M: og, N: kk, K: L, Alpha: 1, Beta: 1}
					if isPointwise(p) {
						sub.Sgemm(gm, dy[(n*p.OutC+g*og)*L:], xs, acc[g*og*kk:])
						continue
					}
					// op(B) = col^T: sliver column j is im2col row j0+j over
					// output positions p0..p0+kc, gathered straight from x.
					sub.sgemmPacked(gm, dy[(n*p.OutC+g*og)*L:], func(bp []float32, j0, p0, nc, kc, NR int) {
						var row [gemmKC]float32
						for jr := 0; jr < nc; jr += NR {
							s := bp[jr*kc : (jr+NR)*kc]
							for j := 0; j < NR; j++ {
								if jr+j >= nc {
									for q := 0; q < kc; q++ {
										s[q*NR+j] = 0
									}
									continue
								}
								colRow(p, xs, j0+jr+j, p0, row[:kc])
								for q, v := range row[:kc] {
									s[q*NR+j] = v
								}
							}
						}
					}, acc[g*og*kk:])
				}
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
// goroutines across samples, each running GEMMs with inner workers. Batch 8
// on 16 cores runs 8 samples at once with 2 GEMM workers each, rather than
// one sample at a time, whose small late-layer maps have too few tiles to
// occupy every core.
func (be *Kernels) split(n int) (inner, outer int) {
	w := be.workers()
	outer = max(min(n, w), 1)
	return max(w/outer, 1), outer
}

func (be *Kernels) gemmWith(workers int, g backend.Gemm, a, b, c []float32) {
	sub := Kernels{Workers: workers}
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

func (be *Kernels) dwForward(p backend.Conv, x, w, y []float32) {
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

func (be *Kernels) dwBackwardData(p backend.Conv, dy, w, dx []float32) {
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

func (be *Kernels) dwBackwardFilter(p backend.Conv, x, dy, dw []float32) {
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

// axpyGo adds a·x to y (len(x) == len(y)).
func axpyGo(a float32, x, y []float32) {
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

// dotGo returns Σ x·y with four partial sums.
func dotGo(x, y []float32) float32 {
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
