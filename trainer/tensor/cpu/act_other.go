//go:build !amd64 || purego

package cpu

func sigmoidInto(x, y []float32, silu bool) { sigmoidGo(x, y, silu) }

func siluBackward(x, dy, dx []float32) { siluBackwardGo(x, dy, dx) }
