//go:build !amd64 || purego

package cpu

func axpy(a float32, x, y []float32) { axpyGo(a, x, y) }

func dot(x, y []float32) float32 { return dotGo(x, y) }
