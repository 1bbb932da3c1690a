package cpu

import "github.com/segpipe/segpipe/trainer/tensor/backend"

// minParallel is the output size below which broadcast loops stay on one
// goroutine. Tests lower it to drive the split paths on small shapes.
var minParallel = 1 << 16

// Binary writes y = f(a, b) over the broadcast shape.
func (be *Kernels) Binary(f backend.Binary, s backend.Broadcast, a, b, y []float32) {
	bcastRuns(s.Shape, s.StrideA, s.StrideB, be.workers(), func(o, ia, ib, n, da, db int) {
		ys := y[o : o+n]
		switch f {
		case backend.Add:
			for i := range ys {
				ys[i] = a[ia+i*da] + b[ib+i*db]
			}
		case backend.Sub:
			for i := range ys {
				ys[i] = a[ia+i*da] - b[ib+i*db]
			}
		case backend.Mul:
			for i := range ys {
				ys[i] = a[ia+i*da] * b[ib+i*db]
			}
		case backend.Div:
			for i := range ys {
				ys[i] = a[ia+i*da] / b[ib+i*db]
			}
		case backend.Maximum:
			for i := range ys {
				ys[i] = max(a[ia+i*da], b[ib+i*db])
			}
		case backend.Minimum:
			for i := range ys {
				ys[i] = min(a[ia+i*da], b[ib+i*db])
			}
		default:
			panic("cpu: unknown binary function")
		}
	})
}

// BinaryBackward accumulates the gradients of f into da and db. Runs go
// parallel only when no gradient slot is shared between runs, i.e. neither
// operand being differentiated is stretched.
func (be *Kernels) BinaryBackward(f backend.Binary, s backend.Broadcast, a, b, dy, da, db []float32) {
	w := be.workers()
	if (da != nil && len(da) != len(dy)) || (db != nil && len(db) != len(dy)) {
		w = 1
	}
	bcastRuns(s.Shape, s.StrideA, s.StrideB, w, func(o, ia, ib, n, sa, sb int) {
		for i := 0; i < n; i++ {
			g := dy[o+i]
			x, z := a[ia+i*sa], b[ib+i*sb]
			var dA, dB float32
			switch f {
			case backend.Add:
				dA, dB = g, g
			case backend.Sub:
				dA, dB = g, -g
			case backend.Mul:
				dA, dB = g*z, g*x
			case backend.Div:
				dA, dB = g/z, -g*x/(z*z)
			case backend.Maximum, backend.Minimum:
				switch {
				case x == z:
					dA, dB = g/2, g/2
				case (x > z) == (f == backend.Maximum):
					dA = g
				default:
					dB = g
				}
			}
			if da != nil {
				da[ia+i*sa] += dA
			}
			if db != nil {
				db[ib+i*sb] += dB
			}
		}
	})
}

// bcastRuns walks the output in row-major order as runs along the last
// (merged) axis, calling fn(outOffset, aOffset, bOffset, runLen, aStep,
// bStep). Adjacent axes whose strides compose are merged first so
// same-shape and per-channel cases become long runs. With several workers
// the runs are split across goroutines; fn must then only write to
// locations owned by its output range.
func bcastRuns(out, sa, sb []int, workers int, fn func(o, ia, ib, n, da, db int)) {
	var shp, as, bs []int
	for i := range out {
		if out[i] == 1 {
			continue
		}
		if k := len(shp) - 1; k >= 0 && as[k] == sa[i]*out[i] && bs[k] == sb[i]*out[i] {
			shp[k] *= out[i]
			as[k], bs[k] = sa[i], sb[i]
			continue
		}
		shp = append(shp, out[i])
		as = append(as, sa[i])
		bs = append(bs, sb[i])
	}
	total := 1
	for _, d := range out {
		total *= d
	}
	if total == 0 {
		return
	}
	if len(shp) == 0 {
		fn(0, 0, 0, 1, 0, 0)
		return
	}
	last := len(shp) - 1
	n := shp[last]
	runs := total / n
	walk := func(r0, r1 int) {
		idx := make([]int, last)
		ia, ib := 0, 0
		rem := r0
		for k := last - 1; k >= 0; k-- {
			idx[k] = rem % shp[k]
			rem /= shp[k]
			ia += idx[k] * as[k]
			ib += idx[k] * bs[k]
		}
		for r := r0; r < r1; r++ {
			fn(r*n, ia, ib, n, as[last], bs[last])
			for k := last - 1; k >= 0; k-- {
				idx[k]++
				ia += as[k]
				ib += bs[k]
				if idx[k] < shp[k] {
					break
				}
				ia -= as[k] * shp[k]
				ib -= bs[k] * shp[k]
				idx[k] = 0
			}
		}
	}
	if workers <= 1 || total < minParallel {
		walk(0, runs)
		return
	}
	parallelFor(workers, runs, walk)
}
