//go:build amd64 && !purego

package cpu

//go:noescape
func axpyAVX2(a float32, x, y *float32, n int)

//go:noescape
func dotAVX2(x, y *float32, n int) float32

// axpy adds a·x to y (len(x) == len(y)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	n := 0
	if haveAVX2 {
		if n = len(x) &^ 15; n > 0 {
			axpyAVX2(a, &x[0], &y[0], n)
		}
	}
	axpyGo(a, x[n:], y[n:])
}

// dot returns Σ x·y.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	n := 0
	var s float32
	if haveAVX2 {
		if n = len(x) &^ 15; n > 0 {
			s = dotAVX2(&x[0], &y[0], n)
		}
	}
	return s + dotGo(x[n:], y[n:])
}
