package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// gradCase is one differentiable computation checked against central
// finite differences. Inputs with RequiresGrad are checked; the others are
// constants.
type gradCase struct {
	name   string
	inputs func(r *rand.Rand) []*Tensor
	f      func(tp *Tape, in []*Tensor) []*Tensor
}

// Finite differences are taken in float32 arithmetic but the probe loss
// L = Σ r·y is summed in float64. Outputs that do not depend on a perturbed
// input reproduce bit-for-bit between the two evaluations, so their rounding
// cancels exactly; the remaining noise is ~1e-7·|y|·(affected outputs)/eps,
// and extrapolation removes the eps² truncation term (see below),
// far below the tolerance, while any wrong derivative (a missing term, a
// transposed index, a wrong scale) is off by O(|grad|) and fails.
const (
	fdEps  = 2e-2
	fdAtol = 1e-4
	fdRtol = 1e-3
)

func probeLoss(outs []*Tensor, r [][]float32) float64 {
	var s float64
	for k, o := range outs {
		for i, v := range o.ToHost(nil) {
			s += float64(r[k][i]) * float64(v)
		}
	}
	return s
}

// checkGrad returns the worst mismatch as an error, or nil.
func checkGrad(c gradCase, seed uint64) error { return checkGradOn(nil, c, seed) }

// checkGradOn runs the check with the inputs on be (nil: where the case
// makes them), perturbing them through explicit host copies so that it
// runs on memory the host cannot see.
func checkGradOn(be backend.Backend, c gradCase, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	in := onBackend(be, c.inputs(rng))
	tp := NewTape(be)
	outs := c.f(tp, in)
	r := make([][]float32, len(outs))
	seeds := make([]*Tensor, len(outs))
	for k, o := range outs {
		r[k] = make([]float32, o.Numel())
		for i := range r[k] {
			r[k][i] = float32(rng.Float64()*2 - 1)
		}
		seeds[k] = Upload(o.Backend(), r[k], o.Shape...)
	}
	if err := tp.BackwardFrom(outs, seeds); err != nil {
		return err
	}
	checked := 0
	for ii, x := range in {
		if x == nil || !x.RequiresGrad {
			continue
		}
		if !x.HasGrad() {
			return fmt.Errorf("input %d received no gradient", ii)
		}
		grad := x.GradToHost(nil)
		vals := x.ToHost(nil)
		for i := range vals {
			orig := vals[i]
			// Richardson extrapolation of two central differences cancels the
			// eps² truncation term, which dominates for curved ops (batch-norm
			// over a handful of samples); each difference divides by the step
			// float32 actually took.
			diff := func(h float32) float64 {
				hi, lo := orig+h, orig-h
				vals[i] = hi
				x.FromHost(vals)
				lp := probeLoss(c.f(nil, in), r)
				vals[i] = lo
				x.FromHost(vals)
				lm := probeLoss(c.f(nil, in), r)
				vals[i] = orig
				x.FromHost(vals)
				return (lp - lm) / float64(hi-lo)
			}
			num := (4*diff(fdEps/2) - diff(fdEps)) / 3
			ana := float64(grad[i])
			if d := math.Abs(ana - num); !(d <= fdAtol+fdRtol*math.Max(math.Abs(ana), math.Abs(num))) {
				return fmt.Errorf("input %d %v element %d: analytic %.6g, numeric %.6g", ii, x.Shape, i, ana, num)
			}
			checked++
		}
	}
	if checked == 0 {
		return fmt.Errorf("no input requires grad")
	}
	return nil
}

// onBackend uploads copies of in to be (nil: returns in as it is).
func onBackend(be backend.Backend, in []*Tensor) []*Tensor {
	if be == nil {
		return in
	}
	out := make([]*Tensor, len(in))
	for i, x := range in {
		if x == nil {
			continue
		}
		y := Upload(be, x.ToHost(nil), x.Shape...)
		y.Name, y.RequiresGrad = x.Name, x.RequiresGrad
		out[i] = y
	}
	return out
}

// param returns a uniform [-1,1) tensor that requires grad.
func param(r *rand.Rand, shape ...int) *Tensor {
	t := random(hostBackend, r, -1, 1, shape...)
	t.RequiresGrad = true
	return t
}

// spaced returns a tensor whose values keep at least 0.05 (> 2·eps) from every
// kink (0 for ReLU/Abs, lo/hi for Clamp) and from each other, so a ±eps
// probe never crosses a non-differentiable point or reorders a max.
func spaced(r *rand.Rand, shape ...int) *Tensor {
	t := ZerosOn(hostBackend, shape...)
	perm := r.Perm(t.Numel())
	for i, p := range perm {
		t.Host()[i] = float32(p-t.Numel()/2)*0.1 + 0.05
	}
	t.RequiresGrad = true
	return t
}

func one(f func(tp *Tape, in []*Tensor) *Tensor) func(tp *Tape, in []*Tensor) []*Tensor {
	return func(tp *Tape, in []*Tensor) []*Tensor { return []*Tensor{f(tp, in)} }
}

func gradCases() []gradCase {
	conv := func(n, c, h, w, o, k, stride, pad, groups int, bias bool) gradCase {
		return gradCase{
			name: fmt.Sprintf("conv2d n%d c%d %dx%d o%d k%d s%d p%d g%d bias=%v", n, c, h, w, o, k, stride, pad, groups, bias),
			inputs: func(r *rand.Rand) []*Tensor {
				in := []*Tensor{param(r, n, c, h, w), param(r, o, c/groups, k, k), nil}
				if bias {
					in[2] = param(r, o)
				}
				return in
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.Conv2d(in[0], in[1], in[2], ConvOptions{Stride: stride, Padding: pad, Groups: groups})
			}),
		}
	}
	convT := func(n, ci, h, w, co, k, stride, pad, outPad, groups int) gradCase {
		return gradCase{
			name: fmt.Sprintf("convT n%d ci%d %dx%d co%d k%d s%d p%d op%d g%d", n, ci, h, w, co, k, stride, pad, outPad, groups),
			inputs: func(r *rand.Rand) []*Tensor {
				return []*Tensor{param(r, n, ci, h, w), param(r, ci, co/groups, k, k), param(r, co)}
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.ConvTranspose2d(in[0], in[1], in[2], ConvOptions{Stride: stride, Padding: pad, Groups: groups, OutputPadding: outPad})
			}),
		}
	}
	unary := func(name string, gen func(r *rand.Rand, shape ...int) *Tensor, f func(tp *Tape, x *Tensor) *Tensor) gradCase {
		return gradCase{name: name,
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{gen(r, 2, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return f(tp, in[0]) }),
		}
	}
	positive := func(r *rand.Rand, shape ...int) *Tensor {
		t := random(hostBackend, r, 0.5, 2, shape...)
		t.RequiresGrad = true
		return t
	}
	// Maximum/Minimum operands: a on the grid 0.1k+0.05, b on 0.1k, so
	// |a−b| ≥ 0.05 > 2·eps and no probe crosses a tie.
	onGrid := func(r *rand.Rand, shape ...int) *Tensor {
		t := spaced(r, shape...)
		for i := range t.Host() {
			t.Host()[i] -= 0.05
		}
		return t
	}
	binary := func(name string, sa, sb []int, gen func(r *rand.Rand, shape ...int) *Tensor, f func(tp *Tape, a, b *Tensor) *Tensor) gradCase {
		genA := param
		if name == "maximum" || name == "minimum" {
			genA = spaced
		}
		return gradCase{name: fmt.Sprintf("%s %v %v", name, sa, sb),
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{genA(r, sa...), gen(r, sb...)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return f(tp, in[0], in[1]) }),
		}
	}
	bnOn := func(tp *Tape, in []*Tensor, train, silu bool) *Tensor {
		o := BatchNormOptions{Training: train, Momentum: 0.03, Eps: 1e-3, SiLU: silu}
		if train { // running stats would drift across probes; they have no gradient anyway
			return tp.BatchNorm2d(in[0], in[1], in[2], nil, nil, o)
		}
		return tp.BatchNorm2d(in[0], in[1], in[2], in[3], in[4], o)
	}
	bnInputs := func(shape ...int) func(r *rand.Rand) []*Tensor {
		return func(r *rand.Rand) []*Tensor {
			c := shape[1]
			rm := random(hostBackend, r, -0.5, 0.5, c)
			rv := random(hostBackend, r, 0.5, 1.5, c)
			return []*Tensor{param(r, shape...), param(r, c), param(r, c), rm, rv}
		}
	}
	bn := func(train, silu bool, shape ...int) gradCase {
		return gradCase{name: fmt.Sprintf("batchnorm train=%v silu=%v %v", train, silu, shape),
			inputs: bnInputs(shape...),
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return bnOn(tp, in, train, silu) }),
		}
	}
	// x read by another op too: recorded after the batch-norm, that op's
	// backward gives x its gradient first and the batch-norm's must add to
	// it; recorded before, the batch-norm's is the first writer.
	bnShared := func(train, otherFirst bool, shape ...int) gradCase {
		return gradCase{name: fmt.Sprintf("batchnorm train=%v silu, x also scaled (scale recorded first %v) %v", train, otherFirst, shape),
			inputs: bnInputs(shape...),
			f: func(tp *Tape, in []*Tensor) []*Tensor {
				if otherFirst {
					s := tp.Scale(in[0], 0.7)
					return []*Tensor{s, bnOn(tp, in, train, true)}
				}
				y := bnOn(tp, in, train, true)
				return []*Tensor{y, tp.Scale(in[0], 0.7)}
			},
		}
	}
	return []gradCase{
		conv(2, 3, 5, 6, 4, 3, 1, 1, 1, true),
		conv(2, 4, 7, 7, 6, 3, 2, 1, 2, false),
		conv(1, 4, 6, 5, 4, 3, 1, 1, 4, false), // depthwise
		conv(2, 3, 6, 6, 3, 3, 2, 1, 3, true),  // depthwise, strided
		conv(2, 5, 4, 4, 3, 1, 1, 0, 1, true),  // pointwise fast path
		conv(1, 2, 5, 5, 2, 5, 1, 2, 1, false), // large window, pad 2
		conv(1, 2, 6, 6, 3, 2, 2, 0, 1, true),  // even kernel
		convT(2, 3, 3, 4, 2, 2, 2, 0, 0, 1),    // Proto's upsampler shape
		convT(1, 4, 3, 3, 6, 3, 2, 1, 1, 2),
		convT(1, 2, 4, 3, 3, 3, 1, 1, 0, 1),
		bn(true, false, 3, 2, 3, 3),
		bn(true, false, 4, 3),
		bn(false, false, 2, 3, 2, 2),
		bn(true, true, 3, 2, 3, 3),
		bn(false, true, 2, 3, 2, 2),
		bnShared(true, false, 2, 3, 2, 3),
		bnShared(true, true, 2, 3, 2, 3),
		bnShared(false, false, 2, 2, 3, 2),
		unary("silu", param, (*Tape).SiLU),
		unary("sigmoid", param, (*Tape).Sigmoid),
		unary("relu", spaced, (*Tape).ReLU),
		unary("exp", param, (*Tape).Exp),
		unary("log", positive, (*Tape).Log),
		unary("abs", spaced, (*Tape).Abs),
		unary("neg", param, (*Tape).Neg),
		unary("sqrt", positive, (*Tape).Sqrt),
		unary("square", param, (*Tape).Square),
		unary("atan", param, (*Tape).Atan),
		unary("tanh", param, (*Tape).Tanh),
		unary("scale", param, func(tp *Tape, x *Tensor) *Tensor { return tp.Scale(x, -1.7) }),
		unary("addscalar", param, func(tp *Tape, x *Tensor) *Tensor { return tp.AddScalar(x, 0.3) }),
		unary("clamp", spaced, func(tp *Tape, x *Tensor) *Tensor { return tp.Clamp(x, -0.2, 0.3) }),
		binary("add", []int{2, 3, 4}, []int{2, 3, 4}, param, (*Tape).Add),
		binary("add", []int{2, 3, 2, 2}, []int{3, 1, 1}, param, (*Tape).Add),
		binary("sub", []int{2, 1, 4}, []int{3, 1}, param, (*Tape).Sub),
		binary("mul", []int{2, 3, 4}, []int{4}, param, (*Tape).Mul),
		binary("mul", []int{3, 1}, []int{2, 1, 4}, param, (*Tape).Mul),
		binary("div", []int{2, 3}, []int{2, 3}, positive, (*Tape).Div),
		binary("div", []int{2, 3}, []int{1}, positive, (*Tape).Div),
		binary("maximum", []int{2, 3}, []int{2, 3}, onGrid, (*Tape).Maximum),
		binary("minimum", []int{4, 3}, []int{3}, onGrid, (*Tape).Minimum),
		{name: "bce-with-logits",
			inputs: func(r *rand.Rand) []*Tensor {
				x := random(hostBackend, r, -4, 4, 3, 5)
				x.RequiresGrad = true
				return []*Tensor{x, param(r, 3, 5)}
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor { return tp.BCEWithLogits(in[0], in[1]) })},
		{name: "maxpool k5 s1 p2",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{spaced(r, 2, 2, 5, 6)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MaxPool2d(in[0], 5, 1, 2) })},
		{name: "maxpool k2 s2",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{spaced(r, 1, 2, 4, 5)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MaxPool2d(in[0], 2, 2, 0) })},
		{name: "upsample x2",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 2, 3, 2)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.UpsampleNearest(in[0], 2) })},
		{name: "upsample x4",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 1, 2, 2, 3)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.UpsampleNearest(in[0], 4) })},
		{name: "concat axis1",
			inputs: func(r *rand.Rand) []*Tensor {
				return []*Tensor{param(r, 2, 1, 3), param(r, 2, 3, 3), param(r, 2, 2, 3)}
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Concat(1, in...) })},
		{name: "concat axis-1 with constant",
			inputs: func(r *rand.Rand) []*Tensor {
				return []*Tensor{param(r, 2, 3, 2), random(hostBackend, r, -1, 1, 2, 3, 1)}
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Concat(-1, in...) })},
		// The first writer of a gradient copies where it covers it and later
		// ones add: an input concatenated twice, or also read by another op.
		{name: "concat of one input twice, and another op",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 2, 3), param(r, 2, 1, 3)} },
			f: func(tp *Tape, in []*Tensor) []*Tensor {
				return []*Tensor{tp.Concat(1, in[0], in[1], in[0]), tp.Square(in[1])}
			}},
		{name: "split then concat of its pieces, and reshape of a reused input",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 5, 2)} },
			f: func(tp *Tape, in []*Tensor) []*Tensor {
				p := tp.Split(in[0], 1, 2, 3)
				return []*Tensor{tp.Concat(1, p[1], p[0]), tp.Reshape(in[0], 4, 5), tp.Scale(in[0], 2)}
			}},
		{name: "split axis2 (all outputs)",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 2, 6, 2)} },
			f:      func(tp *Tape, in []*Tensor) []*Tensor { return tp.Split(in[0], 2, 1, 3, 2) }},
		{name: "split views (outer axes of length 1; all outputs)",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 1, 6, 2)} },
			f:      func(tp *Tape, in []*Tensor) []*Tensor { return tp.Split(in[0], 1, 2, 0, 4) }},
		{name: "chunk views, one output used",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 4, 3)} },
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.SiLU(tp.Chunk(in[0], 2, 0)[1])
			})},
		{name: "chunk one output used",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 4, 3)} },
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.SiLU(tp.Chunk(in[0], 2, 1)[1])
			})},
		{name: "slice",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 5)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Slice(in[0], 1, 1, 4) })},
		{name: "index-select repeats",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 4, 3)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.IndexSelect(in[0], 1, []int{3, 0, 3, 1}) })},
		{name: "reshape then square",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 6)} },
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.Square(tp.Reshape(in[0], 3, -1, 2))
			})},
		{name: "permute 0231",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 4, 2)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Permute(in[0], 0, 2, 3, 1) })},
		{name: "transpose",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 2, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Transpose(in[0], 0, -1) })},
		{name: "matmul batched",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 4), param(r, 2, 4, 5)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MatMul(in[0], in[1]) })},
		{name: "matmul shared rhs",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 2, 4), param(r, 4, 3)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MatMul(in[0], in[1]) })},
		{name: "matmulT transA",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 4, 3), param(r, 2, 4, 5)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MatMulT(in[0], in[1], true, false) })},
		{name: "matmulT transB",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 4), param(r, 2, 5, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MatMulT(in[0], in[1], false, true) })},
		{name: "matmulT both, shared",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 4, 3), param(r, 5, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MatMulT(in[0], in[1], true, true) })},
		{name: "softmax last",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 5)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Softmax(in[0], -1) })},
		{name: "softmax middle",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 4, 3)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Softmax(in[0], 1) })},
		{name: "sum",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Sum(in[0]) })},
		{name: "mean",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.Mean(in[0]) })},
		{name: "sum axis keep",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.SumAxis(in[0], 1, true) })},
		{name: "mean axis drop",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return tp.MeanAxis(in[0], -1, false) })},
		{name: "attention block",
			inputs: func(r *rand.Rand) []*Tensor {
				// dim 4, 1 head, key dim 2, head dim 4 (qkv = 8 channels), 3x2 map.
				return []*Tensor{param(r, 2, 4, 3, 2), param(r, 8, 4, 1, 1), param(r, 4, 1, 3, 3)}
			},
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return attention(tp, in[0], in[1], in[2], 1, 2, 4)
			})},
		{name: "shared input, two consumers",
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 2, 3)} },
			f: one(func(tp *Tape, in []*Tensor) *Tensor {
				return tp.Mul(tp.Sigmoid(in[0]), tp.Exp(in[0]))
			})},
	}
}

// attention composes the ops the way arch spec 5.5 describes.
func attention(tp *Tape, x, wqkv, wpe *Tensor, heads, kd, hd int) *Tensor {
	b, dim, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	n := h * w
	qkv := tp.Conv2d(x, wqkv, nil, ConvOptions{})
	parts := tp.Split(tp.Reshape(qkv, b, heads, 2*kd+hd, n), 2, kd, kd, hd)
	q, k, v := parts[0], parts[1], parts[2]
	s := tp.Scale(tp.MatMulT(q, k, true, false), float32(1/math.Sqrt(float64(kd))))
	a := tp.Softmax(s, -1)
	o := tp.Reshape(tp.MatMulT(v, a, false, true), b, dim, h, w)
	pe := tp.Conv2d(tp.Reshape(v, b, dim, h, w), wpe, nil, ConvOptions{Padding: 1, Groups: dim})
	return tp.Add(o, pe)
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	for _, c := range gradCases() {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				if err := checkGrad(c, seed); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
		})
	}
}

// TestGradCheckRejectsWrongGradient proves the checker can fail: an op
// whose backward is deliberately wrong (SiLU's derivative replaced by
// sigmoid's, and a 1% scale error) must be reported.
func TestGradCheckRejectsWrongGradient(t *testing.T) {
	wrong := map[string]func(tp *Tape, x *Tensor) *Tensor{
		"silu with sigmoid derivative": func(tp *Tape, x *Tensor) *Tensor {
			y := ZerosOn(hostBackend, x.Shape...)
			for i, v := range x.Host() {
				y.Host()[i] = v * sigmoid(v)
			}
			if tp.wants(x) {
				tp.push(func() {
					g := x.gradAlloc()
					for i, d := range y.GradHost() {
						s := sigmoid(x.Host()[i])
						g[i] += d * s * (1 - s)
					}
				}, y)
			}
			return y
		},
		"scale off by 1%": func(tp *Tape, x *Tensor) *Tensor {
			y := tp.NoGrad().Scale(x, 2)
			if tp.wants(x) {
				tp.push(func() {
					g := x.gradAlloc()
					for i, d := range y.GradHost() {
						g[i] += d * 2.02
					}
				}, y)
			}
			return y
		},
	}
	for name, f := range wrong {
		c := gradCase{name: name,
			inputs: func(r *rand.Rand) []*Tensor { return []*Tensor{param(r, 3, 4)} },
			f:      one(func(tp *Tape, in []*Tensor) *Tensor { return f(tp, in[0]) }),
		}
		if err := checkGrad(c, 1); err == nil {
			t.Errorf("%s: wrong gradient passed the check", name)
		}
	}
}

// TestGradientsOnParallelPaths reruns every check with the host-side
// parallel threshold at one element and more goroutines than cores, so the
// split loops (broadcast runs, concat/split copies, bias sums, upsample)
// are exercised on small shapes.
func TestGradientsOnParallelPaths(t *testing.T) {
	saved := hostBackend
	hostBackend = &cpu.Backend{Kernels: cpu.Kernels{MinParallel: 1}}
	defer func() { hostBackend = saved }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, c := range gradCases() {
		if err := checkGrad(c, 5); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	t.Run("layout forward", TestLayoutOps)
	t.Run("conv forward", TestConv2dMatchesDirectLoop)
	t.Run("convT forward", TestConvTranspose2dMatchesScatterDefinition)
}
