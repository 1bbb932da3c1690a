package model

import "github.com/segpipe/segpipe/trainer/tensor"

// executor runs the forward with real arithmetic on a tape.
type executor struct {
	tp    *tensor.Tape
	train bool
}

func (e *executor) training() bool { return e.train }

func (e *executor) conv2d(x *tensor.Tensor, c *Conv2d) *tensor.Tensor {
	var b *tensor.Tensor
	if c.Bias != nil {
		b = c.Bias.Value
	}
	return e.tp.Conv2d(x, c.Weight.Value, b, tensor.ConvOptions{Stride: c.Stride, Padding: c.Pad, Groups: c.Groups})
}

func (e *executor) convTranspose2d(x *tensor.Tensor, c *ConvTranspose2d) *tensor.Tensor {
	return e.tp.ConvTranspose2d(x, c.Weight.Value, c.Bias.Value, tensor.ConvOptions{Stride: c.Stride})
}

func (e *executor) batchNorm(x *tensor.Tensor, bn *BatchNorm, silu bool) *tensor.Tensor {
	if e.train {
		bn.NumBatchesTracked++
	}
	return e.tp.BatchNorm2d(x, bn.Weight.Value, bn.Bias.Value, bn.RunningMean.Value, bn.RunningVar.Value,
		tensor.BatchNormOptions{Training: e.train, Momentum: BNMomentum, Eps: BNEps, SiLU: silu})
}

func (e *executor) silu(x *tensor.Tensor) *tensor.Tensor   { return e.tp.SiLU(x) }
func (e *executor) add(a, b *tensor.Tensor) *tensor.Tensor { return e.tp.Add(a, b) }
func (e *executor) concat(axis int, xs ...*tensor.Tensor) *tensor.Tensor {
	return e.tp.Concat(axis, xs...)
}
func (e *executor) split(x *tensor.Tensor, axis int, sizes ...int) []*tensor.Tensor {
	return e.tp.Split(x, axis, sizes...)
}
func (e *executor) upsample(x *tensor.Tensor, f int) *tensor.Tensor {
	return e.tp.UpsampleNearest(x, f)
}
func (e *executor) maxPool(x *tensor.Tensor, k, s, p int) *tensor.Tensor {
	return e.tp.MaxPool2d(x, k, s, p)
}
func (e *executor) reshape(x *tensor.Tensor, shape ...int) *tensor.Tensor {
	return e.tp.Reshape(x, shape...)
}
func (e *executor) matmulT(a, b *tensor.Tensor, ta, tb bool) *tensor.Tensor {
	return e.tp.MatMulT(a, b, ta, tb)
}
func (e *executor) softmax(x *tensor.Tensor) *tensor.Tensor          { return e.tp.Softmax(x, -1) }
func (e *executor) scale(x *tensor.Tensor, s float32) *tensor.Tensor { return e.tp.Scale(x, s) }
func (e *executor) detach(x *tensor.Tensor) *tensor.Tensor           { return x.Detach() }
