//go:build !amd64 || purego

package cpu

func sigmoidInto(x, y []float32, silu bool) { sigmoidGo(x, y, silu) }
