//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// kernel6x16AVX2 is the AVX2+FMA micro-kernel in gemm_amd64.s: twelve
// 8-wide accumulators hold a 6×16 block of C.
//
//go:noescape
func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha float32, overwrite bool)

var avx2Kernel = microKernel{name: "avx2-6x16", mr: 6, nr: 16, fn: func(kc int, alpha float32, a, b, c []float32, ldc int, overwrite bool) {
	// Bounds the assembly relies on, checked once per call instead of per load.
	_ = a[6*kc-1]
	_ = b[16*kc-1]
	_ = c[5*ldc+15]
	kernel6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, overwrite)
}}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		kern = avx2Kernel
	}
}
