package tensor

import (
	"github.com/segpipe/segpipe/internal/cputime"
	"math/rand/v2"
	"testing"
)

// convBN is Conv (no bias) + BatchNorm (train) + optional SiLU, the
// building block of every YOLO26 layer.
type convBN struct {
	w, g, b, rm, rv *Tensor
	opt             ConvOptions
	act             bool
}

func newConvBN(r *rand.Rand, cin, cout, k, stride, groups int, act bool) *convBN {
	c := &convBN{
		w: param(r, cout, cin/groups, k, k), g: FullOn(hostBackend, 1, cout), b: ZerosOn(hostBackend, cout),
		rm: ZerosOn(hostBackend, cout), rv: FullOn(hostBackend, 1, cout),
		opt: ConvOptions{Stride: stride, Padding: k / 2, Groups: groups}, act: act,
	}
	c.g.RequiresGrad, c.b.RequiresGrad = true, true
	return c
}

func (c *convBN) forward(tp *Tape, x *Tensor) *Tensor {
	y := tp.BatchNorm2d(tp.Conv2d(x, c.w, nil, c.opt), c.g, c.b, c.rm, c.rv, BatchNormOptions{Training: true, Momentum: 0.03, Eps: 1e-3})
	if c.act {
		y = tp.SiLU(y)
	}
	return y
}

// BenchmarkC3k2Block runs forward+backward of a C3k2-shaped block (split,
// two bottlenecks, concat, fuse, plus a depthwise conv) at 64 channels on a
// 2×64×80×80 input: the mix of GEMM, im2col, batch-norm and elementwise
// work a YOLO26 layer does, with op outputs freshly allocated each step and
// with them recycled (Tape.RecycleOutputs).
func BenchmarkC3k2Block(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x := random(hostBackend, r, -1, 1, 2, 64, 80, 80)
	cv1 := newConvBN(r, 64, 64, 1, 1, 1, true)
	m1a, m1b := newConvBN(r, 32, 16, 3, 1, 1, true), newConvBN(r, 16, 32, 3, 1, 1, true)
	m2a, m2b := newConvBN(r, 32, 16, 3, 1, 1, true), newConvBN(r, 16, 32, 3, 1, 1, true)
	cv2 := newConvBN(r, 128, 64, 1, 1, 1, true)
	dw := newConvBN(r, 64, 64, 3, 1, 64, true)
	for _, recycle := range []bool{false, true} {
		name := "fresh-outputs"
		if recycle {
			name = "recycled-outputs"
		}
		b.Run(name, func(b *testing.B) {
			done := cputime.Meter(func(s float64) { b.ReportMetric(s*1e3/float64(b.N), "cpu-ms/op") })
			for b.Loop() {
				tp := NewTape(nil)
				y := tp.Chunk(cv1.forward(tp, x), 2, 1)
				b1 := tp.Add(y[1], m1b.forward(tp, m1a.forward(tp, y[1])))
				b2 := tp.Add(b1, m2b.forward(tp, m2a.forward(tp, b1)))
				out := dw.forward(tp, cv2.forward(tp, tp.Concat(1, y[0], y[1], b1, b2)))
				if recycle {
					tp.RecycleOutputs()
				}
				if err := tp.Backward(tp.Mean(out)); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}
