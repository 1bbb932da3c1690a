//go:build !amd64 || purego

package cpu

func simdKernels() []microKernel { return nil }
