//go:build amd64 && !purego

package cpu

//go:noescape
func sumShiftAVX2(x *float32, n int, k float64) (s, ss float64)

//go:noescape
func sumDyDyxAVX2(dy, x *float32, n int, k float64) (s, sx float64)

//go:noescape
func affineAVX2(x, y *float32, n int, a, b float32)

//go:noescape
func bnBackAVX2(dy, x, dx *float32, n int, kd, mdy, kx, m float32)

// The wrappers run whole groups of eight through the vector code and the
// tail through the portable loops.

func sumShift(x []float32, k float64) (s, ss float64) {
	n := 0
	if haveAVX2 {
		if n = len(x) &^ 7; n > 0 {
			s, ss = sumShiftAVX2(&x[0], n, k)
		}
	}
	a, b := sumShiftGo(x[n:], k)
	return s + a, ss + b
}

func sumDyDyx(dy, x []float32, k float64) (s, sx float64) {
	x = x[:len(dy)]
	n := 0
	if haveAVX2 {
		if n = len(dy) &^ 7; n > 0 {
			s, sx = sumDyDyxAVX2(&dy[0], &x[0], n, k)
		}
	}
	a, b := sumDyDyxGo(dy[n:], x[n:], k)
	return s + a, sx + b
}

func affine(x, y []float32, a, b float32) {
	y = y[:len(x)]
	n := 0
	if haveAVX2 {
		if n = len(x) &^ 7; n > 0 {
			affineAVX2(&x[0], &y[0], n, a, b)
		}
	}
	affineGo(x[n:], y[n:], a, b)
}

func bnBack(dy, x, dx []float32, kd, mdy, kx, m float32) {
	x, dx = x[:len(dy)], dx[:len(dy)]
	n := 0
	if haveAVX2 {
		if n = len(dy) &^ 7; n > 0 {
			bnBackAVX2(&dy[0], &x[0], &dx[0], n, kd, mdy, kx, m)
		}
	}
	bnBackGo(dy[n:], x[n:], dx[n:], kd, mdy, kx, m)
}
