//go:build amd64 && !purego

package augment

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 kernels; the Go versions are their test
// oracles and the path on CPUs without AVX2.
var haveAVX2 = cpu.X86.HasAVX2

// haveAVX512 selects the AVX-512 kernels (F, BW, DQ and VBMI: byte
// permutes, mask registers, 64-bit multiplies) where there are some; the
// AVX2 ones then handle the tails and stay the path of other CPUs.
var haveAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VBMI

// hsvRowAVX2 is applyRowGo for n pixels, n a positive multiple of 8, eight
// pixels per step: sdiv and hdiv recomputed by float division (the same
// integers, see the kernel), t.v and t.coef read by gathers. t.v is read
// as 4-byte words at t.v[v] (v ≤ 255), which stay inside the table
// because coef follows v.
//
//go:noescape
func hsvRowAVX2(rp, gp, bp *uint8, n int, t *hsvTable)

// hsvRowAVX512 is hsvRowAVX2 for any n > 0 (the last step masked).
//
//go:noescape
func hsvRowAVX512(rp, gp, bp *uint8, n int, t *hsvTable)

// applyRow maps a row of planar RGB pixels in place (applyRowGo's bytes).
func (t *hsvTable) applyRow(r, g, b []uint8) {
	g = g[:len(r)]
	b = b[:len(r)]
	n := 0
	if haveAVX512 && !forceAVX2 && !forceGoKernels {
		if len(r) > 0 {
			hsvRowAVX512(&r[0], &g[0], &b[0], len(r), t)
		}
		return
	}
	if haveAVX2 && !forceGoKernels {
		if m := (len(r) - n) &^ 7; m > 0 {
			hsvRowAVX2(&r[n], &g[n], &b[n], m, t)
			n += m
		}
	}
	t.applyRowGo(r[n:], g[n:], b[n:])
}

// vblendAVX2 is vblendGo for n word pairs, n a positive multiple of 16.
//
//go:noescape
func vblendAVX2(dst *uint32, top, bot *uint8, n int, iy, wy uint32)

// hsampleAVX2 is hsampleGo for n pixels, n a positive multiple of 8, with
// the source position relative to column xa (u0 = U − xa·2¹⁶) in 32 bits
// and the left tap's pair index clamped to [0, last], the blended row's
// last column pair; the pair reads are gathers, R's and G's (adjacent)
// one 64-bit element per pixel.
//
//go:noescape
func hsampleAVX2(rp, gp, bp *uint8, n int, sc *uint32, u0, du, last int32)

// hsampleAVX512 is hsampleAVX2 for n a positive multiple of 16 and
// |du| ≤ 2¹⁷, reading each step's taps from registers instead of
// gathering them; sc must stay readable for 93 dwords past the row.
//
//go:noescape
func hsampleAVX512(rp, gp, bp *uint8, n int, sc *uint32, u0, du, last int32)

// vblendAVX512 is vblendAVX2 for any n > 0 (the last step masked).
//
//go:noescape
func vblendAVX512(dst *uint32, top, bot *uint8, n int, iy, wy uint32)

func vblend(sc []uint32, top, bot []byte, iy, wy uint32) {
	top, bot = top[:len(sc)+3], bot[:len(sc)+3]
	n := 0
	if haveAVX512 && !forceAVX2 && !forceGoKernels {
		if len(sc) > 0 {
			vblendAVX512(&sc[0], &top[0], &bot[0], len(sc), iy, wy)
		}
		return
	}
	if haveAVX2 && !forceGoKernels {
		if m := (len(sc) - n) &^ 15; m > 0 {
			vblendAVX2(&sc[n], &top[n], &bot[n], m, iy, wy)
			n += m
		}
	}
	vblendGo(sc[n:], top[n:], bot[n:], iy, wy)
}

func hsample(r, g, b []byte, sc []uint32, U, dU int64, xa, maxX int) {
	g = g[:len(r)]
	b = b[:len(r)]
	n := 0
	// The kernels step relative positions in 32 bits: every lane they
	// compute (the last step's included) must fit, and so must the row.
	// Clamping to the row's last pair instead of maxX's is the same (no
	// tap lies past the row except at maxX) and keeps every read inside
	// sc.
	const lim = 1 << 30
	last := len(sc)/3 - 1
	fits := func(m, step int) bool {
		u0 := U - int64(xa)<<16
		ue := u0 + int64(m+step-1)*dU
		return m > 0 && u0 > -lim && u0 < lim && ue > -lim && ue < lim && int64(step)*dU > -lim && int64(step)*dU < lim &&
			len(sc) < lim && last <= maxX-xa+1
	}
	if haveAVX512 && !forceAVX2 && !forceGoKernels {
		// Sixteen taps within 32 pairs (|dU| ≤ 2), and the window of 96
		// dwords from any pair readable (sampleSpanRow leaves the slack).
		if m := len(r) &^ 15; -2<<16 <= dU && dU <= 2<<16 && cap(sc)-len(sc) >= hsampleSlack && fits(m, 16) {
			hsampleAVX512(&r[0], &g[0], &b[0], m, &sc[0], int32(U-int64(xa)<<16), int32(dU), int32(last))
			U += int64(m) * dU
			n = m
		}
	}
	if haveAVX2 && !forceGoKernels {
		if m := (len(r) - n) &^ 7; fits(m, 8) {
			hsampleAVX2(&r[n], &g[n], &b[n], m, &sc[0], int32(U-int64(xa)<<16), int32(dU), int32(last))
			U += int64(m) * dU
			n += m
		}
	}
	hsampleGo(r[n:], g[n:], b[n:], sc, U, dU, xa, maxX)
}

// coefRowAVX2 is coefRowGo for a whole 256-entry row, eight saturations
// per step.
//
//go:noescape
func coefRowAVX2(row *uint64, k *coefInputs, hf, hf1 float32, sh *[4]uint64)

func coefRow(row []uint64, k *coefInputs, hf, hf1 float32, sh *[4]uint64) {
	row = row[:256]
	if haveAVX2 && !forceGoKernels {
		coefRowAVX2(&row[0], k, hf, hf1, sh)
		return
	}
	coefRowGo(row, k, hf, hf1, sh)
}
