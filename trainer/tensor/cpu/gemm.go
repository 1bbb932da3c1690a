package cpu

import "github.com/segpipe/segpipe/trainer/tensor/backend"

// Blocking parameters: a KC×NC packed B tile (256 KiB) stays in L2 while
// MR×KC slivers of A stream through L1. MC is a multiple of every MR used.
const (
	gemmMC = 96
	gemmNC = 256
	gemmKC = 256
)

// microKernel accumulates alpha·(MR×kc sliver of A)·(kc×NR sliver of B)
// into an MR×NR block of c with row stride ldc, or with overwrite stores it
// without reading c (the first K panel of a Beta = 0 product, which saves a
// zeroing pass over C). Slivers are k-major: a[p*MR+i], b[p*NR+j].
type microKernel struct {
	name   string
	mr, nr int
	// speed is the kernel's throughput relative to the AVX2 kernel on full
	// tiles (measured by BenchmarkSgemm), used to trade it against the
	// padding a larger tile wastes on small matrices.
	speed float64
	fn    func(kc int, alpha float32, a, b, c []float32, ldc int, overwrite bool)
}

// goKernel is the portable 4×4 register-blocked kernel.
var goKernel = microKernel{name: "go4x4", mr: 4, nr: 4, speed: 0.06, fn: kernel4x4}

// kern, when its fn is set, forces one kernel (tests and benchmarks);
// otherwise pickKernel chooses per product among simdKernels and the Go one.
var kern microKernel

// pickKernel returns the kernel with the least estimated time for an m×n
// product: padded tile area divided by relative speed.
func pickKernel(m, n int) microKernel {
	if kern.fn != nil {
		return kern
	}
	best, bestCost := goKernel, 0.0
	for i, k := range append(simdKernels(), goKernel) {
		area := float64((m+k.mr-1)/k.mr*k.mr) * float64((n+k.nr-1)/k.nr*k.nr)
		if cost := area / k.speed; i == 0 || cost < bestCost {
			best, bestCost = k, cost
		}
	}
	return best
}

// KernelName names the GEMM micro-kernel used for large products.
func KernelName() string { return pickKernel(1<<12, 1<<12).name }

// Sgemm computes the product described by g. Work is split into MC×NC
// tiles of C per batch entry; each tile packs its own panels, so tiles are
// independent and any shape (tall, wide, batched) parallelises. A zero
// StrideC with Batch > 1 is not supported (entries would race).
func (be *Kernels) Sgemm(g backend.Gemm, a, b, c []float32) {
	batch := g.Batch
	if batch <= 0 {
		batch = 1
	}
	m, n, k := g.M, g.N, g.K
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || g.Alpha == 0 {
		if g.Beta != 1 {
			scaleC(g, batch, c)
		}
		return
	}
	if g.Beta != 1 && g.Beta != 0 {
		scaleC(g, batch, c)
	}
	mk := pickKernel(m, n)
	tm := (m + gemmMC - 1) / gemmMC
	tn := (n + gemmNC - 1) / gemmNC
	tasks := batch * tm * tn
	w := be.workers()
	if 2*m*n*k < 1<<17 {
		w = 1 // not worth a goroutine
	}
	var pa *aPack
	if batch == 1 && tn > 1 {
		pa = prepackA(mk, g, a)
	}
	parallelTasks(w, tasks, func(_, t int) {
		bi := t / (tm * tn)
		r := t % (tm * tn)
		i0 := (r / tn) * gemmMC
		j0 := (r % tn) * gemmNC
		mc := min(gemmMC, m-i0)
		nc := min(gemmNC, n-j0)
		bb := b[bi*g.StrideB:]
		gemmTile(mk, g, a[bi*g.StrideA:], pa, func(bp []float32, j0, p0, nc, kc, NR int) {
			packB(g, bb, bp, j0, p0, nc, kc, NR)
		}, c[bi*g.StrideC:], i0, j0, mc, nc)
	})
	pa.release()
}

// bPacker packs op(B)[p0:p0+kc, j0:j0+nc] into NR-wide k-major slivers,
// zero-padding the last; it lets a GEMM read B from a virtual matrix
// (an implicit im2col) without materialising it.
type bPacker func(bp []float32, j0, p0, nc, kc, NR int)

// sgemmPacked is Sgemm for a single product whose B comes from pack.
func (be *Kernels) sgemmPacked(g backend.Gemm, a []float32, pack bPacker, c []float32) {
	m, n, k := g.M, g.N, g.K
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || g.Alpha == 0 {
		if g.Beta != 1 {
			scaleC(g, 1, c)
		}
		return
	}
	if g.Beta != 1 && g.Beta != 0 {
		scaleC(g, 1, c)
	}
	mk := pickKernel(m, n)
	tm := (m + gemmMC - 1) / gemmMC
	tn := (n + gemmNC - 1) / gemmNC
	w := be.workers()
	if 2*m*n*k < 1<<17 {
		w = 1
	}
	var pa *aPack
	if tn > 1 {
		pa = prepackA(mk, g, a)
	}
	parallelTasks(w, tm*tn, func(_, t int) {
		i0 := (t / tn) * gemmMC
		j0 := (t % tn) * gemmNC
		gemmTile(mk, g, a, pa, pack, c, i0, j0, min(gemmMC, m-i0), min(gemmNC, n-j0))
	})
	pa.release()
}

// aPack holds op(A) packed once for every (row block, K panel), so the
// column tiles of C share it instead of each packing A again (for a
// convolution, A is the filter and there is one column tile per 256
// output pixels).
type aPack struct {
	buf  []float32
	offs []int // offset of block (ib, pb) at ib*nk + pb
	nk   int
}

func prepackA(mk microKernel, g backend.Gemm, a []float32) *aPack {
	m, k := g.M, g.K
	tm := (m + gemmMC - 1) / gemmMC
	nk := (k + gemmKC - 1) / gemmKC
	offs := make([]int, tm*nk)
	size := 0
	for ib := 0; ib < tm; ib++ {
		mc := min(gemmMC, m-ib*gemmMC)
		mcp := (mc + mk.mr - 1) / mk.mr * mk.mr
		for pb := 0; pb < nk; pb++ {
			offs[ib*nk+pb] = size
			size += mcp * min(gemmKC, k-pb*gemmKC)
		}
	}
	pa := &aPack{buf: getBuf(size), offs: offs, nk: nk}
	for ib := 0; ib < tm; ib++ {
		mc := min(gemmMC, m-ib*gemmMC)
		for pb := 0; pb < nk; pb++ {
			packA(g, a, pa.buf[offs[ib*nk+pb]:], ib*gemmMC, pb*gemmKC, mc, min(gemmKC, k-pb*gemmKC), mk.mr)
		}
	}
	return pa
}

// block returns the packed block of rows i0.. and panel p0...
func (pa *aPack) block(i0, p0 int) []float32 {
	return pa.buf[pa.offs[(i0/gemmMC)*pa.nk+p0/gemmKC]:]
}

func (pa *aPack) release() {
	if pa != nil {
		putBuf(pa.buf)
	}
}

// scaleC applies C ← Beta·C to every batch entry (Beta = 0 clears, so NaNs
// in C do not survive as they would through 0·NaN).
func scaleC(g backend.Gemm, batch int, c []float32) {
	m, n := g.M, g.N
	{
		for bi := 0; bi < batch; bi++ {
			cc := c[bi*g.StrideC : bi*g.StrideC+m*n]
			if g.Beta == 0 {
				zero(cc)
			} else {
				for i := range cc {
					cc[i] *= g.Beta
				}
			}
		}
	}
}

// gemmTile accumulates alpha·op(A)[i0:i0+mc, :]·op(B)[:, j0:j0+nc] into C.
// gemmTile uses pa's packed A when non-nil and packs A itself otherwise.
func gemmTile(mk microKernel, g backend.Gemm, a []float32, pa *aPack, pack bPacker, c []float32, i0, j0, mc, nc int) {
	k := g.K
	MR, NR := mk.mr, mk.nr
	mcp := (mc + MR - 1) / MR * MR
	ncp := (nc + NR - 1) / NR * NR
	kc0 := min(gemmKC, k)
	var ap []float32
	if pa == nil {
		ap = getBuf(mcp * kc0)
		defer putBuf(ap)
	}
	bp := getBuf(ncp * kc0)
	tmp := getBuf(MR * NR)
	for p0 := 0; p0 < k; p0 += gemmKC {
		kc := min(gemmKC, k-p0)
		overwrite := p0 == 0 && g.Beta == 0
		if pa != nil {
			ap = pa.block(i0, p0)
		} else {
			packA(g, a, ap, i0, p0, mc, kc, MR)
		}
		pack(bp, j0, p0, nc, kc, NR)
		for jr := 0; jr < nc; jr += NR {
			bs := bp[jr*kc : (jr+NR)*kc]
			nr := min(NR, nc-jr)
			for ir := 0; ir < mc; ir += MR {
				as := ap[ir*kc : (ir+MR)*kc]
				mr := min(MR, mc-ir)
				if mr == MR && nr == NR {
					off := (i0+ir)*g.N + j0 + jr
					mk.fn(kc, g.Alpha, as, bs, c[off:], g.N, overwrite)
				} else {
					mk.fn(kc, g.Alpha, as, bs, tmp, NR, true)
					for i := 0; i < mr; i++ {
						row := c[(i0+ir+i)*g.N+j0+jr:]
						if overwrite {
							copy(row[:nr], tmp[i*NR:i*NR+nr])
							continue
						}
						for j := 0; j < nr; j++ {
							row[j] += tmp[i*NR+j]
						}
					}
				}
			}
		}
	}
	putBuf(tmp)
	putBuf(bp)
}

// packA copies op(A)[i0:i0+mc, p0:p0+kc] into MR-row slivers, each stored
// k-major (sliver[p*MR+i]), zero-padding the last sliver.
func packA(g backend.Gemm, a, ap []float32, i0, p0, mc, kc, MR int) {
	for ir := 0; ir < mc; ir += MR {
		s := ap[ir*kc : (ir+MR)*kc]
		mr := min(MR, mc-ir)
		if g.TransA { // A stored K×M: each k gives MR contiguous values
			for p := 0; p < kc; p++ {
				src := a[(p0+p)*g.M+i0+ir:]
				d := s[p*MR : p*MR+MR]
				if mr == MR { // fixed-size copies avoid a memmove call per row
					switch MR {
					case 6:
						*(*[6]float32)(d) = [6]float32(src[:6])
						continue
					case 12:
						*(*[12]float32)(d) = [12]float32(src[:12])
						continue
					}
				}
				copy(d[:mr], src[:mr])
				for i := mr; i < MR; i++ {
					d[i] = 0
				}
			}
			continue
		}
		for i := 0; i < MR; i++ {
			if i >= mr {
				for p := 0; p < kc; p++ {
					s[p*MR+i] = 0
				}
				continue
			}
			src := a[(i0+ir+i)*g.K+p0 : (i0+ir+i)*g.K+p0+kc]
			for p, v := range src {
				s[p*MR+i] = v
			}
		}
	}
}

// packB copies op(B)[p0:p0+kc, j0:j0+nc] into NR-column slivers stored
// k-major (sliver[p*NR+j]), zero-padding the last sliver.
func packB(g backend.Gemm, b, bp []float32, j0, p0, nc, kc, NR int) {
	if !g.TransB {
		// B stored K×N: walk it row by row so the reads stream through
		// memory, scattering each row's NR-wide pieces to their slivers.
		for p := 0; p < kc; p++ {
			scatterRow(bp, b[(p0+p)*g.N+j0:(p0+p)*g.N+j0+nc], p, kc, NR)
		}
		return
	}
	for jr := 0; jr < nc; jr += NR {
		s := bp[jr*kc : (jr+NR)*kc]
		nr := min(NR, nc-jr)
		for j := 0; j < NR; j++ { // B stored N×K
			if j >= nr {
				for p := 0; p < kc; p++ {
					s[p*NR+j] = 0
				}
				continue
			}
			src := b[(j0+jr+j)*g.K+p0 : (j0+jr+j)*g.K+p0+kc]
			for p, v := range src {
				s[p*NR+j] = v
			}
		}
	}
}

// kernel4x4 accumulates alpha·(4×kc sliver)·(kc×4 sliver) into the 4×4
// block of c with row stride ldc, keeping all 16 sums in registers.
func kernel4x4(kc int, alpha float32, a, b, c []float32, ldc int, overwrite bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	a = a[:kc*4]
	b = b[:kc*4]
	for p := 0; p < kc*4; p += 4 {
		aa := a[p : p+4 : p+4]
		bb := b[p : p+4 : p+4]
		a0, a1, a2, a3 := aa[0], aa[1], aa[2], aa[3]
		b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	if overwrite {
		r := c[0:4:4]
		r[0], r[1], r[2], r[3] = alpha*c00, alpha*c01, alpha*c02, alpha*c03
		r = c[ldc : ldc+4 : ldc+4]
		r[0], r[1], r[2], r[3] = alpha*c10, alpha*c11, alpha*c12, alpha*c13
		r = c[2*ldc : 2*ldc+4 : 2*ldc+4]
		r[0], r[1], r[2], r[3] = alpha*c20, alpha*c21, alpha*c22, alpha*c23
		r = c[3*ldc : 3*ldc+4 : 3*ldc+4]
		r[0], r[1], r[2], r[3] = alpha*c30, alpha*c31, alpha*c32, alpha*c33
		return
	}
	r := c[0:4:4]
	r[0] += alpha * c00
	r[1] += alpha * c01
	r[2] += alpha * c02
	r[3] += alpha * c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0] += alpha * c10
	r[1] += alpha * c11
	r[2] += alpha * c12
	r[3] += alpha * c13
	r = c[2*ldc : 2*ldc+4 : 2*ldc+4]
	r[0] += alpha * c20
	r[1] += alpha * c21
	r[2] += alpha * c22
	r[3] += alpha * c23
	r = c[3*ldc : 3*ldc+4 : 3*ldc+4]
	r[0] += alpha * c30
	r[1] += alpha * c31
	r[2] += alpha * c32
	r[3] += alpha * c33
}

// NaiveSgemm is the triple-loop reference the tests and benchmarks compare
// against; it computes exactly what Sgemm computes, one dot product at a time.
func NaiveSgemm(g backend.Gemm, a, b, c []float32) {
	batch := max(g.Batch, 1)
	for bi := 0; bi < batch; bi++ {
		aa, bb, cc := a[bi*g.StrideA:], b[bi*g.StrideB:], c[bi*g.StrideC:]
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s float32
				for p := 0; p < g.K; p++ {
					var av, bv float32
					if g.TransA {
						av = aa[p*g.M+i]
					} else {
						av = aa[i*g.K+p]
					}
					if g.TransB {
						bv = bb[j*g.K+p]
					} else {
						bv = bb[p*g.N+j]
					}
					s += av * bv
				}
				if g.Beta == 0 {
					cc[i*g.N+j] = g.Alpha * s
				} else {
					cc[i*g.N+j] = g.Alpha*s + g.Beta*cc[i*g.N+j]
				}
			}
		}
	}
}
