//go:build !amd64 || purego

package cpu

func sumShift(x []float32, k float64) (s, ss float64)     { return sumShiftGo(x, k) }
func sumDyDyx(dy, x []float32, k float64) (s, sx float64) { return sumDyDyxGo(dy, x, k) }
func affine(x, y []float32, a, b float32)                 { affineGo(x, y, a, b) }
func bnBack(dy, x, dx []float32, kd, mdy, kx, m float32)  { bnBackGo(dy, x, dx, kd, mdy, kx, m) }
