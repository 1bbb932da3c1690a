package tensor

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// ConvOptions configures Conv2d and ConvTranspose2d. The zero value means
// stride 1, padding 0, one group. Dilation is always 1.
type ConvOptions struct {
	Stride, Padding, Groups int
	// OutputPadding adds rows/columns at the bottom/right of a transposed
	// convolution's output (PyTorch's output_padding); Conv2d ignores it.
	OutputPadding int
}

func (o ConvOptions) norm() ConvOptions {
	if o.Stride <= 0 {
		o.Stride = 1
	}
	if o.Groups <= 0 {
		o.Groups = 1
	}
	return o
}

// Conv2d cross-correlates x [N,C,H,W] with w [O,C/groups,KH,KW] and adds
// bias b [O] when b is non-nil, giving [N,O,OH,OW] with
// OH = (H+2·Padding−KH)/Stride+1.
func (tp *Tape) Conv2d(x, w, b *Tensor, o ConvOptions) *Tensor {
	o = o.norm()
	if x.Dims() != 4 || w.Dims() != 4 {
		panic(fmt.Sprintf("tensor.Conv2d: want 4-d input and weight, got %s and %s", x.desc(), w.desc()))
	}
	p := backend.Conv{N: x.Shape[0], InC: x.Shape[1], InH: x.Shape[2], InW: x.Shape[3],
		OutC: w.Shape[0], KH: w.Shape[2], KW: w.Shape[3], Stride: o.Stride, Pad: o.Padding, Groups: o.Groups}
	if p.InC%p.Groups != 0 || p.OutC%p.Groups != 0 || w.Shape[1] != p.InC/p.Groups {
		panic(fmt.Sprintf("tensor.Conv2d: input %s, weight %s, groups %d do not fit", x.desc(), w.desc(), o.Groups))
	}
	if b != nil && (b.Numel() != p.OutC) {
		panic(fmt.Sprintf("tensor.Conv2d: bias %s for %d output channels", b.desc(), p.OutC))
	}
	oh, ow := p.OutH(), p.OutW()
	if oh <= 0 || ow <= 0 {
		panic(fmt.Sprintf("tensor.Conv2d: input %s too small for weight %s", x.desc(), w.desc()))
	}
	be := tp.on(x)
	y := outputUninit(be, p.N, p.OutC, oh, ow)
	be.Conv2d(p, x.data, w.data, y.data)
	if b != nil {
		be.ChannelAffine(p.N, p.OutC, oh*ow, y.data, backend.Buffer{}, b.data, y.data)
	}
	if tp.wants(x, w, b) {
		tp.push(func() {
			if needs(x) {
				// The first writer of x's gradient writes it (where the
				// backend can) instead of adding to zeros.
				if gx, write := x.gradForWrite(true); write {
					be.Conv2dBackwardDataWrite(p, y.grad, w.data, gx)
				} else {
					be.Conv2dBackwardData(p, y.grad, w.data, gx)
				}
			}
			if needs(w) {
				be.Conv2dBackwardFilter(p, x.data, y.grad, w.GradBuffer())
			}
			if needs(b) {
				be.ChannelSum(p.N, p.OutC, oh*ow, y.grad, b.GradBuffer())
			}
		}, y)
	}
	return y
}

// ConvTranspose2d is the adjoint of Conv2d in its input: x [N,Cin,H,W],
// w [Cin,Cout/groups,KH,KW] (PyTorch's layout), bias b [Cout] or nil,
// output [N,Cout,(H−1)·Stride−2·Padding+KH+OutputPadding, …].
func (tp *Tape) ConvTranspose2d(x, w, b *Tensor, o ConvOptions) *Tensor {
	o = o.norm()
	if x.Dims() != 4 || w.Dims() != 4 || w.Shape[0] != x.Shape[1] || x.Shape[1]%o.Groups != 0 {
		panic(fmt.Sprintf("tensor.ConvTranspose2d: input %s does not fit weight %s (groups %d)", x.desc(), w.desc(), o.Groups))
	}
	if o.OutputPadding >= o.Stride && o.OutputPadding > 0 {
		panic(fmt.Sprintf("tensor.ConvTranspose2d: output padding %d must be < stride %d", o.OutputPadding, o.Stride))
	}
	cout := w.Shape[1] * o.Groups
	oh := (x.Shape[2]-1)*o.Stride - 2*o.Padding + w.Shape[2] + o.OutputPadding
	ow := (x.Shape[3]-1)*o.Stride - 2*o.Padding + w.Shape[3] + o.OutputPadding
	if oh <= 0 || ow <= 0 {
		panic(fmt.Sprintf("tensor.ConvTranspose2d: empty output for input %s weight %s", x.desc(), w.desc()))
	}
	if b != nil && b.Numel() != cout {
		panic(fmt.Sprintf("tensor.ConvTranspose2d: bias %s for %d output channels", b.desc(), cout))
	}
	// The equivalent forward convolution maps the output back to x.
	p := backend.Conv{N: x.Shape[0], InC: cout, InH: oh, InW: ow, OutC: x.Shape[1],
		KH: w.Shape[2], KW: w.Shape[3], Stride: o.Stride, Pad: o.Padding, Groups: o.Groups}
	be := tp.on(x)
	y := outputUninit(be, p.N, cout, oh, ow)
	be.Conv2dBackwardDataWrite(p, x.data, w.data, y.data)
	if b != nil {
		be.ChannelAffine(p.N, cout, oh*ow, y.data, backend.Buffer{}, b.data, y.data)
	}
	if tp.wants(x, w, b) {
		tp.push(func() {
			if needs(x) {
				// Conv2d overwrites, so its result lands in scratch first.
				tmp := scratch(be, x.Numel())
				be.Conv2d(p, y.grad, w.data, tmp)
				be.Axpby(1, tmp, 1, x.GradBuffer())
				be.Free(tmp)
			}
			if needs(w) {
				be.Conv2dBackwardFilter(p, y.grad, x.data, w.GradBuffer())
			}
			if needs(b) {
				be.ChannelSum(p.N, cout, oh*ow, y.grad, b.GradBuffer())
			}
		}, y)
	}
	return y
}

// BatchNormOptions configures BatchNorm2d.
type BatchNormOptions struct {
	// Training selects batch statistics (and updates the running ones);
	// otherwise the running statistics normalise.
	Training bool
	// Momentum weights the new batch statistic in the running update:
	// running = (1−Momentum)·running + Momentum·batch (PyTorch's convention).
	Momentum float32
	// Eps is added to the variance before the square root.
	Eps float32
	// SiLU applies SiLU to the output: silu(bn(x)), as one op whose
	// passes apply it on backends that can (backend.BatchNormActivator)
	// and as BatchNorm2d then SiLU elsewhere.
	SiLU bool
}

// BatchNorm2d normalises x [N,C,H,W] per channel and applies weight and
// bias ([C] each; nil means 1 and 0). In training mode it uses the batch
// mean and biased variance, and when runningMean/runningVar are non-nil
// updates them in place with the batch mean and the UNBIASED variance
// (as PyTorch does), even on a non-recording tape; like PyTorch it panics
// when a channel has a single value (N·H·W = 1), which has no batch
// variance. In eval mode it uses the running statistics, which must be
// non-nil. Running statistics never receive gradients.
func (tp *Tape) BatchNorm2d(x, weight, bias, runningMean, runningVar *Tensor, o BatchNormOptions) *Tensor {
	if x.Dims() != 4 && x.Dims() != 2 {
		panic(fmt.Sprintf("tensor.BatchNorm2d: want [N,C,H,W] or [N,C], got %s", x.desc()))
	}
	n, c := x.Shape[0], x.Shape[1]
	hw := x.Numel() / max(n*c, 1)
	for _, t := range []*Tensor{weight, bias, runningMean, runningVar} {
		if t != nil && t.Numel() != c {
			panic(fmt.Sprintf("tensor.BatchNorm2d: parameter %s for %d channels", t.desc(), c))
		}
	}
	if o.Training && n*hw < 2 {
		// As PyTorch: one value per channel has no batch variance.
		panic(fmt.Sprintf("tensor.BatchNorm2d: training needs more than one value per channel, input %s", x.desc()))
	}
	if !o.Training && (runningMean == nil || runningVar == nil) {
		panic("tensor.BatchNorm2d: eval mode needs running statistics")
	}
	be := tp.on(x)
	var wd, bd backend.Buffer
	if weight != nil {
		wd = weight.data
	}
	if bias != nil {
		bd = bias.data
	}
	y := outputUninit(be, x.Shape...)
	fused, ok := be.(backend.BatchNormActivator)
	if !ok {
		tp.batchNorm(be, x, y, weight, bias, wd, bd, runningMean, runningVar, o, n, c, hw)
		if o.SiLU {
			return tp.SiLU(y)
		}
		return y
	}
	p := backend.BN{N: n, C: c, HW: hw, Eps: o.Eps, Momentum: o.Momentum}
	if o.SiLU {
		p.Act = backend.BNSiLU
	}
	var backward func(dx backend.Buffer, writeDx bool)
	if o.Training {
		// The saved statistics (mean, invstd and the activation's scales
		// and shifts) live as long as the backward.
		k := 2
		if p.Act != backend.BNIdentity {
			k = 4
		}
		stats := be.Alloc(k * c)
		mean, invstd := stats.Slice(0, c), stats.Slice(c, 2*c)
		var affine, rm, rv backend.Buffer
		if p.Act != backend.BNIdentity {
			affine = stats.Slice(2*c, 4*c)
		}
		if runningMean != nil && runningVar != nil {
			rm, rv = runningMean.data, runningVar.data
		}
		fused.BatchNormTrainAct(p, x.data, wd, bd, y.data, mean, invstd, affine, rm, rv)
		backward = func(dx backend.Buffer, writeDx bool) {
			fused.BatchNormBackwardAct(p, x.data, y.grad, mean, invstd, wd, affine, dx, paramGrad(weight), paramGrad(bias), writeDx)
		}
	} else {
		rm, rv := runningMean.data, runningVar.data
		fused.BatchNormEvalAct(p, x.data, wd, bd, rm, rv, y.data)
		backward = func(dx backend.Buffer, writeDx bool) {
			fused.BatchNormEvalBackwardAct(p, x.data, y.grad, wd, bd, rm, rv, dx, paramGrad(weight), paramGrad(bias), writeDx)
		}
	}
	if tp.wants(x, weight, bias) {
		tp.push(func() {
			// The first writer of x's gradient writes it (a convolution's
			// output has no other reader): no zero fill, no read of zeros.
			var dx backend.Buffer
			write := false
			if needs(x) {
				dx, write = x.gradForWrite(true)
			}
			backward(dx, write)
		}, y)
	}
	return y
}

// paramGrad is t's gradient buffer when t takes one, else absent.
func paramGrad(t *Tensor) backend.Buffer {
	if !needs(t) {
		return backend.Buffer{}
	}
	return t.GradBuffer()
}

// batchNorm is BatchNorm2d into y on a backend without fused
// activations; wd and bd are weight's and bias's data.
func (tp *Tape) batchNorm(be backend.Backend, x, y, weight, bias *Tensor, wd, bd backend.Buffer, runningMean, runningVar *Tensor, o BatchNormOptions, n, c, hw int) {
	if o.Training {
		// The saved statistics live as long as the backward closure.
		stats := be.Alloc(3 * c)
		mean, invstd, varU := stats.Slice(0, c), stats.Slice(c, 2*c), stats.Slice(2*c, 3*c)
		be.BatchNormTrain(n, c, hw, o.Eps, x.data, wd, bd, y.data, mean, invstd, varU)
		if runningMean != nil && runningVar != nil {
			m := o.Momentum
			be.Axpby(m, mean, 1-m, runningMean.data)
			be.Axpby(m, varU, 1-m, runningVar.data)
		}
		if tp.wants(x, weight, bias) {
			tp.push(func() {
				be.BatchNormBackward(n, c, hw, x.data, y.grad, mean, invstd, wd, paramGrad(x), paramGrad(weight), paramGrad(bias))
			}, y)
		}
		return
	}
	rm, rv := runningMean.data, runningVar.data
	be.BatchNormEval(n, c, hw, o.Eps, x.data, wd, bd, rm, rv, y.data)
	if tp.wants(x, weight, bias) {
		tp.push(func() {
			be.BatchNormEvalBackward(n, c, hw, o.Eps, x.data, y.grad, wd, rm, rv, paramGrad(x), paramGrad(weight), paramGrad(bias))
		}, y)
	}
}

// MaxPool2d takes the maximum over k×k windows of x [N,C,H,W] with the
// given stride and zero-cost padding (padded cells never win).
func (tp *Tape) MaxPool2d(x *Tensor, k, stride, padding int) *Tensor {
	if x.Dims() != 4 || k <= 0 || stride <= 0 || padding < 0 || 2*padding > k {
		panic(fmt.Sprintf("tensor.MaxPool2d: input %s with k=%d stride=%d padding=%d", x.desc(), k, stride, padding))
	}
	p := backend.Pool{N: x.Shape[0], C: x.Shape[1], H: x.Shape[2], W: x.Shape[3], K: k, Stride: stride, Pad: padding}
	be := tp.on(x)
	y := outputUninit(be, p.N, p.C, p.OutH(), p.OutW())
	arg := be.Alloc(y.Numel()) // int32 winners
	be.MaxPool2d(p, x.data, y.data, arg)
	if tp.wants(x) {
		tp.push(func() { be.MaxPool2dBackward(p, y.grad, arg, x.GradBuffer()) }, y)
	}
	return y
}

// UpsampleNearest repeats every pixel of x [N,C,H,W] into a
// factor×factor block (nearest-neighbour upsampling by an integer factor).
func (tp *Tape) UpsampleNearest(x *Tensor, factor int) *Tensor {
	if x.Dims() != 4 || factor < 1 {
		panic(fmt.Sprintf("tensor.UpsampleNearest: input %s factor %d", x.desc(), factor))
	}
	n, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	p := backend.Upsample{Planes: n * c, H: h, W: w, Factor: factor}
	be := tp.on(x)
	y := outputUninit(be, n, c, h*factor, w*factor)
	be.UpsampleNearest(p, x.data, y.data)
	if tp.wants(x) {
		tp.push(func() { be.UpsampleNearestBackward(p, y.grad, x.GradBuffer()) }, y)
	}
	return y
}
