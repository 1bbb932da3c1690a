//go:build amd64 && !purego

package augment

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 kernels; the Go versions are their test
// oracles and the path on CPUs without AVX2.
var haveAVX2 = cpu.X86.HasAVX2

// hsvRowAVX2 is applyRowGo for n pixels, n a positive multiple of 8, eight
// pixels per step with the table lookups as gathers. t.v is read as
// 4-byte words at t.v[v] (v ≤ 255), which stay inside the table because
// coef follows v.
//
//go:noescape
func hsvRowAVX2(rp, gp, bp *uint8, n int, t *hsvTable, sdiv, hdiv *int32)

// applyRow maps a row of planar RGB pixels in place (applyRowGo's bytes).
func (t *hsvTable) applyRow(r, g, b []uint8) {
	g = g[:len(r)]
	b = b[:len(r)]
	n := 0
	if haveAVX2 && !forceGoKernels {
		n = len(r) &^ 7
		if n > 0 {
			hsvRowAVX2(&r[0], &g[0], &b[0], n, t, &sdiv[0], &hdiv[0])
		}
	}
	t.applyRowGo(r[n:], g[n:], b[n:])
}
