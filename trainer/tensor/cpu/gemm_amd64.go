//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// kernel6x16AVX2 is the AVX2+FMA micro-kernel in gemm_amd64.s: twelve
// 8-wide accumulators hold a 6×16 block of C.
//
//go:noescape
func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha float32, overwrite bool)

var avx2Kernel = microKernel{name: "avx2-6x16", mr: 6, nr: 16, speed: 1, fn: func(kc int, alpha float32, a, b, c []float32, ldc int, overwrite bool) {
	// Bounds the assembly relies on, checked once per call instead of per load.
	_ = a[6*kc-1]
	_ = b[16*kc-1]
	_ = c[5*ldc+15]
	kernel6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, overwrite)
}}

// kernel12x32AVX512 is the AVX-512 micro-kernel in gemm_amd64.s: 24
// 16-wide accumulators hold a 12×32 block of C.
//
//go:noescape
func kernel12x32AVX512(kc int, a, b, c *float32, ldc int, alpha float32, overwrite bool)

var avx512Kernel = microKernel{name: "avx512-12x32", mr: 12, nr: 32, speed: 1.4, fn: func(kc int, alpha float32, a, b, c []float32, ldc int, overwrite bool) {
	_ = a[12*kc-1]
	_ = b[32*kc-1]
	_ = c[11*ldc+31]
	kernel12x32AVX512(kc, &a[0], &b[0], &c[0], ldc, alpha, overwrite)
}}

var simd = func() []microKernel {
	var ks []microKernel
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	if cpu.X86.HasAVX512F {
		ks = append(ks, avx512Kernel)
	}
	return ks
}()

// simdKernels lists the vector kernels this CPU can run.
func simdKernels() []microKernel { return simd }
