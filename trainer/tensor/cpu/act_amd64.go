//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func sigmoidAVX2(x, y *float32, n int, silu bool)

//go:noescape
func siluBackwardAVX2(x, dy, dx *float32, n int)

var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// sigmoidInto writes sigmoid(x) (times x when silu) into y; the vector
// kernel takes whole groups of eight and the scalar code the tail.
func sigmoidInto(x, y []float32, silu bool) {
	y = y[:len(x)]
	n := 0
	if haveAVX2 {
		n = len(x) &^ 7
		if n > 0 {
			sigmoidAVX2(&x[0], &y[0], n, silu)
		}
	}
	sigmoidGo(x[n:], y[n:], silu)
}

// siluBackward accumulates dx += dy·silu'(x).
func siluBackward(x, dy, dx []float32) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	n := 0
	if haveAVX2 {
		n = len(x) &^ 7
		if n > 0 {
			siluBackwardAVX2(&x[0], &dy[0], &dx[0], n)
		}
	}
	siluBackwardGo(x[n:], dy[n:], dx[n:])
}
