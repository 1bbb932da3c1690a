package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Forward results are compared with direct float64 loops written from the
// ops' definitions (PyTorch semantics), never with another fast path.

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s: element %d = %.7g, want %.7g", what, i, got[i], want[i])
		}
	}
}

func refConv(x, w, b *Tensor, o ConvOptions) []float64 {
	o = o.norm()
	n, c, h, wd := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	oc, kh, kw := w.Shape[0], w.Shape[2], w.Shape[3]
	oh := (h+2*o.Padding-kh)/o.Stride + 1
	ow := (wd+2*o.Padding-kw)/o.Stride + 1
	cg, og := c/o.Groups, oc/o.Groups
	y := make([]float64, n*oc*oh*ow)
	for in := 0; in < n; in++ {
		for co := 0; co < oc; co++ {
			g := co / og
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					s := 0.0
					if b != nil {
						s = float64(b.Host()[co])
					}
					for ci := 0; ci < cg; ci++ {
						for ky := 0; ky < kh; ky++ {
							for kx := 0; kx < kw; kx++ {
								iy, ix := oy*o.Stride-o.Padding+ky, ox*o.Stride-o.Padding+kx
								if iy < 0 || iy >= h || ix < 0 || ix >= wd {
									continue
								}
								s += float64(x.Host()[((in*c+g*cg+ci)*h+iy)*wd+ix]) * float64(w.Host()[((co*cg+ci)*kh+ky)*kw+kx])
							}
						}
					}
					y[((in*oc+co)*oh+oy)*ow+ox] = s
				}
			}
		}
	}
	return y
}

// refConvT scatters every input pixel through the kernel (the definition
// of a transposed convolution).
func refConvT(x, w, b *Tensor, o ConvOptions) []float64 {
	o = o.norm()
	n, ci, h, wd := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	cog, kh, kw := w.Shape[1], w.Shape[2], w.Shape[3]
	co := cog * o.Groups
	cig := ci / o.Groups
	oh := (h-1)*o.Stride - 2*o.Padding + kh + o.OutputPadding
	ow := (wd-1)*o.Stride - 2*o.Padding + kw + o.OutputPadding
	y := make([]float64, n*co*oh*ow)
	for in := 0; in < n; in++ {
		for c := 0; c < ci; c++ {
			g := c / cig
			for iy := 0; iy < h; iy++ {
				for ix := 0; ix < wd; ix++ {
					v := float64(x.Host()[((in*ci+c)*h+iy)*wd+ix])
					for oc := 0; oc < cog; oc++ {
						for ky := 0; ky < kh; ky++ {
							for kx := 0; kx < kw; kx++ {
								oy, ox := iy*o.Stride-o.Padding+ky, ix*o.Stride-o.Padding+kx
								if oy < 0 || oy >= oh || ox < 0 || ox >= ow {
									continue
								}
								y[((in*co+g*cog+oc)*oh+oy)*ow+ox] += v * float64(w.Host()[((c*cog+oc)*kh+ky)*kw+kx])
							}
						}
					}
				}
			}
		}
	}
	if b != nil {
		for i := range y {
			y[i] += float64(b.Host()[(i/(oh*ow))%co])
		}
	}
	return y
}

func TestConv2dMatchesDirectLoop(t *testing.T) {
	cases := []struct {
		n, c, h, w, o, k int
		opt              ConvOptions
		bias             bool
	}{
		{2, 3, 9, 7, 5, 3, ConvOptions{Padding: 1}, true},
		{1, 8, 10, 10, 16, 3, ConvOptions{Stride: 2, Padding: 1}, false},
		{3, 6, 5, 6, 6, 3, ConvOptions{Padding: 1, Groups: 6}, true}, // depthwise
		{2, 6, 9, 9, 6, 5, ConvOptions{Stride: 2, Padding: 2, Groups: 6}, false},
		{2, 8, 4, 4, 12, 1, ConvOptions{}, true},                      // pointwise
		{1, 8, 6, 6, 4, 3, ConvOptions{Padding: 1, Groups: 2}, false}, // grouped
		{2, 70, 6, 5, 130, 3, ConvOptions{Padding: 1}, true},          // spans GEMM blocks
		{1, 3, 20, 18, 7, 2, ConvOptions{Stride: 2}, false},
		{1, 40, 24, 20, 100, 3, ConvOptions{Padding: 1}, true}, // several row, column and K tiles
		{1, 20, 30, 30, 16, 3, ConvOptions{Stride: 2, Padding: 1}, false},
		{2, 4, 19, 37, 4, 3, ConvOptions{Padding: 1, Groups: 4}, true}, // depthwise, vector rows
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range cases {
		name := fmt.Sprintf("%dx%dx%dx%d o%d k%d %+v", c.n, c.c, c.h, c.w, c.o, c.k, c.opt)
		t.Run(name, func(t *testing.T) {
			x := random(hostBackend, r, -1, 1, c.n, c.c, c.h, c.w)
			g := max(c.opt.Groups, 1)
			w := random(hostBackend, r, -1, 1, c.o, c.c/g, c.k, c.k)
			var b *Tensor
			if c.bias {
				b = random(hostBackend, r, -1, 1, c.o)
			}
			y := (*Tape)(nil).Conv2d(x, w, b, c.opt)
			closeTo(t, "conv2d", y.Host(), refConv(x, w, b, c.opt), 1e-5)
		})
	}
}

func TestConvTranspose2dMatchesScatterDefinition(t *testing.T) {
	cases := []struct {
		n, ci, h, w, co, k int
		opt                ConvOptions
	}{
		{2, 4, 5, 3, 4, 2, ConvOptions{Stride: 2}}, // Proto's upsampler
		{1, 3, 4, 4, 5, 3, ConvOptions{Stride: 2, Padding: 1, OutputPadding: 1}},
		{2, 4, 3, 3, 6, 3, ConvOptions{Padding: 1, Groups: 2}},
		{1, 66, 3, 4, 70, 2, ConvOptions{Stride: 2}},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range cases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			x := random(hostBackend, r, -1, 1, c.n, c.ci, c.h, c.w)
			g := max(c.opt.Groups, 1)
			w := random(hostBackend, r, -1, 1, c.ci, c.co/g, c.k, c.k)
			b := random(hostBackend, r, -1, 1, c.co)
			y := (*Tape)(nil).ConvTranspose2d(x, w, b, c.opt)
			closeTo(t, "convT", y.Host(), refConvT(x, w, b, c.opt), 1e-5)
		})
	}
}

func TestBatchNormTrainAndRunningStats(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	n, c, hw := 3, 4, 5
	x := random(hostBackend, r, -2, 3, n, c, 1, hw)
	w, b := random(hostBackend, r, 0.5, 1.5, c), random(hostBackend, r, -1, 1, c)
	rm, rv := random(hostBackend, r, -1, 1, c), random(hostBackend, r, 0.5, 2, c)
	rm0, rv0 := rm.Clone(), rv.Clone()
	const mom, eps = 0.03, 1e-3
	y := (*Tape)(nil).BatchNorm2d(x, w, b, rm, rv, BatchNormOptions{Training: true, Momentum: mom, Eps: eps})
	want := make([]float64, len(x.Host()))
	for ch := 0; ch < c; ch++ {
		var s, ss float64
		for i := 0; i < n; i++ {
			for j := 0; j < hw; j++ {
				s += float64(x.Host()[(i*c+ch)*hw+j])
			}
		}
		m := s / float64(n*hw)
		for i := 0; i < n; i++ {
			for j := 0; j < hw; j++ {
				d := float64(x.Host()[(i*c+ch)*hw+j]) - m
				ss += d * d
			}
		}
		vb, vu := ss/float64(n*hw), ss/float64(n*hw-1)
		for i := 0; i < n; i++ {
			for j := 0; j < hw; j++ {
				k := (i*c+ch)*hw + j
				want[k] = (float64(x.Host()[k])-m)/math.Sqrt(vb+eps)*float64(w.Host()[ch]) + float64(b.Host()[ch])
			}
		}
		closeTo(t, "running mean", rm.Host()[ch:ch+1], []float64{(1-mom)*float64(rm0.Host()[ch]) + mom*m}, 1e-6)
		closeTo(t, "running var (unbiased)", rv.Host()[ch:ch+1], []float64{(1-mom)*float64(rv0.Host()[ch]) + mom*vu}, 1e-6)
	}
	closeTo(t, "train output", y.Host(), want, 1e-5)

	// Eval mode uses the running statistics and leaves them alone.
	rm1, rv1 := rm.Clone(), rv.Clone()
	ye := (*Tape)(nil).BatchNorm2d(x, w, b, rm, rv, BatchNormOptions{Momentum: mom, Eps: eps})
	for k := range want {
		ch := (k / hw) % c
		want[k] = (float64(x.Host()[k])-float64(rm.Host()[ch]))/math.Sqrt(float64(rv.Host()[ch])+eps)*float64(w.Host()[ch]) + float64(b.Host()[ch])
	}
	closeTo(t, "eval output", ye.Host(), want, 1e-5)
	if !AllClose(rm.Host(), rm1.Host(), 0, 0) || !AllClose(rv.Host(), rv1.Host(), 0, 0) {
		t.Fatal("eval mode changed the running statistics")
	}
}

func TestMaxPoolMatchesWindowMax(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ h, w, k, s, p int }{{7, 6, 5, 1, 2}, {8, 8, 2, 2, 0}, {7, 5, 3, 2, 1}} {
		x := random(hostBackend, r, -1, 1, 2, 3, c.h, c.w)
		y := (*Tape)(nil).MaxPool2d(x, c.k, c.s, c.p)
		oh, ow := (c.h+2*c.p-c.k)/c.s+1, (c.w+2*c.p-c.k)/c.s+1
		want := make([]float64, 0, len(y.Host()))
		for pl := 0; pl < 6; pl++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					m := math.Inf(-1)
					for ky := 0; ky < c.k; ky++ {
						for kx := 0; kx < c.k; kx++ {
							iy, ix := oy*c.s-c.p+ky, ox*c.s-c.p+kx
							if iy >= 0 && iy < c.h && ix >= 0 && ix < c.w {
								m = math.Max(m, float64(x.Host()[(pl*c.h+iy)*c.w+ix]))
							}
						}
					}
					want = append(want, m)
				}
			}
		}
		closeTo(t, fmt.Sprintf("maxpool %+v", c), y.Host(), want, 0)
	}
}

func TestSoftmaxRowsSumToOneAndMatchDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	x := random(hostBackend, r, -30, 30, 2, 5, 3)
	y := (*Tape)(nil).Softmax(x, 1)
	want := make([]float64, len(x.Host()))
	for o := 0; o < 2; o++ {
		for in := 0; in < 3; in++ {
			var s float64
			for i := 0; i < 5; i++ {
				s += math.Exp(float64(x.Host()[(o*5+i)*3+in]))
			}
			for i := 0; i < 5; i++ {
				k := (o*5+i)*3 + in
				want[k] = math.Exp(float64(x.Host()[k])) / s
			}
		}
	}
	closeTo(t, "softmax", y.Host(), want, 1e-6)
	big := (*Tape)(nil).Softmax(New(hostBackend, []float32{1000, 1001, 999}, 1, 3), -1)
	for _, v := range big.Host() {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("softmax overflowed on large logits: %v", big.Host())
		}
	}
}

func TestMatMulMatchesDotProducts(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		batch, m, k, n int
		ta, tb         bool
	}{{1, 1, 1, 1, false, false}, {3, 5, 7, 4, false, false}, {2, 70, 300, 9, true, false}, {2, 6, 5, 67, false, true}, {4, 3, 8, 5, true, true}} {
		ash := []int{c.batch, c.m, c.k}
		if c.ta {
			ash = []int{c.batch, c.k, c.m}
		}
		bsh := []int{c.batch, c.k, c.n}
		if c.tb {
			bsh = []int{c.batch, c.n, c.k}
		}
		a, b := random(hostBackend, r, -1, 1, ash...), random(hostBackend, r, -1, 1, bsh...)
		y := (*Tape)(nil).MatMulT(a, b, c.ta, c.tb)
		want := make([]float64, 0, len(y.Host()))
		for bi := 0; bi < c.batch; bi++ {
			for i := 0; i < c.m; i++ {
				for j := 0; j < c.n; j++ {
					s := 0.0
					for p := 0; p < c.k; p++ {
						ai := (bi*c.m+i)*c.k + p
						if c.ta {
							ai = (bi*c.k+p)*c.m + i
						}
						bj := (bi*c.k+p)*c.n + j
						if c.tb {
							bj = (bi*c.n+j)*c.k + p
						}
						s += float64(a.Host()[ai]) * float64(b.Host()[bj])
					}
					want = append(want, s)
				}
			}
		}
		closeTo(t, fmt.Sprintf("matmul %+v", c), y.Host(), want, 1e-5)
	}
}

func TestLayoutOps(t *testing.T) {
	x := New(hostBackend, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 2, 3, 2)
	var tp *Tape
	p := tp.Permute(x, 2, 0, 1)
	want := []float64{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}
	closeTo(t, "permute", p.Host(), want, 0)
	if fmt.Sprint(p.Shape) != "[2 2 3]" {
		t.Fatalf("permute shape %v", p.Shape)
	}
	parts := tp.Split(x, 1, 1, 2)
	closeTo(t, "split 0", parts[0].Host(), []float64{0, 1, 6, 7}, 0)
	closeTo(t, "split 1", parts[1].Host(), []float64{2, 3, 4, 5, 8, 9, 10, 11}, 0)
	back := tp.Concat(1, parts...)
	closeTo(t, "concat(split)", back.Host(), []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0)
	up := tp.UpsampleNearest(New(hostBackend, []float32{1, 2, 3, 4}, 1, 1, 2, 2), 2)
	closeTo(t, "upsample", up.Host(), []float64{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0)
	sel := tp.IndexSelect(x, 1, []int{2, 0})
	closeTo(t, "index select", sel.Host(), []float64{4, 5, 0, 1, 10, 11, 6, 7}, 0)
	s := tp.SumAxis(x, 0, false)
	closeTo(t, "sum axis", s.Host(), []float64{6, 8, 10, 12, 14, 16}, 0)
	bc := tp.Add(x, New(hostBackend, []float32{100, 200, 300}, 3, 1))
	closeTo(t, "broadcast add", bc.Host(), []float64{100, 101, 202, 203, 304, 305, 106, 107, 208, 209, 310, 311}, 0)
}

func TestBCEWithLogitsIsStable(t *testing.T) {
	x := New(hostBackend, []float32{-100, -2, 0, 3, 100}, 5)
	tg := New(hostBackend, []float32{0, 1, 0.5, 0, 1}, 5)
	y := (*Tape)(nil).BCEWithLogits(x, tg)
	want := make([]float64, 5)
	for i, v := range x.Host() {
		xv, tv := float64(v), float64(tg.Host()[i])
		want[i] = math.Max(xv, 0) - xv*tv + math.Log1p(math.Exp(-math.Abs(xv)))
	}
	closeTo(t, "bce", y.Host(), want, 1e-6)
}

// TestSplitViews: where every axis before the split axis has length 1 the
// pieces share x's memory (no copy) and hold its values; otherwise they
// are copies.
func TestSplitViews(t *testing.T) {
	x := New(hostBackend, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 1, 6, 2)
	tp := NewTape(nil)
	parts := tp.Split(x, 1, 2, 4)
	for i, want := range [][]float32{{0, 1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11}} {
		if got := parts[i].Host(); !slices.Equal(got, want) {
			t.Errorf("piece %d: %v, want %v", i, got, want)
		}
		if parts[i].data.Mem != x.data.Mem {
			t.Errorf("piece %d of an outermost split is a copy, want a view", i)
		}
	}
	y := New(hostBackend, make([]float32, 12), 2, 3, 2)
	if p := tp.Split(y, 1, 1, 2); p[0].data.Mem == y.data.Mem {
		t.Error("a piece of a split with an outer axis of 2 shares its input's memory")
	}
}
