package model

import (
	"fmt"
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor"
)

// FLOPs breaks down the multiply-accumulates of one forward pass (batch 1).
type FLOPs struct {
	// ConvMACs counts Conv2d MACs: output elements × (c_in/groups) × k².
	ConvMACs int64
	// ConvTransposeMACs counts ConvTranspose2d MACs: input elements ×
	// c_out × k² (the ultralytics-thop rule).
	ConvTransposeMACs int64
	// MatMulMACs counts the attention matmuls: output elements × inner size.
	MatMulMACs int64
	// BNElements is the number of elements BatchNorm normalises.
	BNElements int64
}

// MACs is every multiply-accumulate (conv, transposed conv, matmul).
func (f FLOPs) MACs() int64 { return f.ConvMACs + f.ConvTransposeMACs + f.MatMulMACs }

// GFLOPs is 2×MACs/1e9, the convention used in segpipe's summaries.
func (f FLOPs) GFLOPs() float64 { return 2 * float64(f.MACs()) / 1e9 }

// ThopGFLOPs reproduces Ultralytics' summary figure (ultralytics-thop
// rules): 2 × (conv and transposed-conv MACs + 4 ops per BatchNorm
// element), attention matmuls not counted.
func (f FLOPs) ThopGFLOPs() float64 {
	return 2 * float64(f.ConvMACs+f.ConvTransposeMACs+4*f.BNElements) / 1e9
}

func (f *FLOPs) add(g FLOPs) {
	f.ConvMACs += g.ConvMACs
	f.ConvTransposeMACs += g.ConvTransposeMACs
	f.MatMulMACs += g.MatMulMACs
	f.BNElements += g.BNElements
}

// counter is the shape-only executor: tensors carry a Shape and nil Data.
type counter struct {
	train bool
	f     FLOPs
	// outputs counts the elements of every op's result: what the tape of
	// a training forward holds until the backward frees it.
	outputs int64
}

// out counts y as an op's result and returns it.
func (c *counter) out(y *tensor.Tensor) *tensor.Tensor {
	c.outputs += prod(y.Shape)
	return y
}

func shaped(s ...int) *tensor.Tensor { return &tensor.Tensor{Shape: s} }

func prod(s []int) int64 {
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n
}

func (c *counter) training() bool { return c.train }

func (c *counter) conv2d(x *tensor.Tensor, cv *Conv2d) *tensor.Tensor {
	if x.Shape[1] != cv.C1 {
		panic(fmt.Sprintf("model: %s expects %d input channels, got shape %v", cv.Weight.Name, cv.C1, x.Shape))
	}
	oh := (x.Shape[2]+2*cv.Pad-cv.K)/cv.Stride + 1
	ow := (x.Shape[3]+2*cv.Pad-cv.K)/cv.Stride + 1
	y := shaped(x.Shape[0], cv.C2, oh, ow)
	c.f.ConvMACs += prod(y.Shape) * int64(cv.C1/cv.Groups*cv.K*cv.K)
	return c.out(y)
}

func (c *counter) convTranspose2d(x *tensor.Tensor, cv *ConvTranspose2d) *tensor.Tensor {
	c.f.ConvTransposeMACs += prod(x.Shape) * int64(cv.C2*cv.K*cv.K)
	return c.out(shaped(x.Shape[0], cv.C2, x.Shape[2]*cv.Stride, x.Shape[3]*cv.Stride))
}

// batchNorm counts the SiLU's output as well: where the backend fuses
// the two it is not stored, and the count stays a bound.
func (c *counter) batchNorm(x *tensor.Tensor, _ *BatchNorm, silu bool) *tensor.Tensor {
	c.f.BNElements += prod(x.Shape)
	y := c.out(x)
	if silu {
		y = c.silu(y)
	}
	return y
}

func (c *counter) silu(x *tensor.Tensor) *tensor.Tensor { return c.out(x) }

func (c *counter) add(a, b *tensor.Tensor) *tensor.Tensor {
	if !slices.Equal(a.Shape, b.Shape) {
		panic(fmt.Sprintf("model: add of shapes %v and %v", a.Shape, b.Shape))
	}
	return c.out(a)
}

func (c *counter) concat(axis int, xs ...*tensor.Tensor) *tensor.Tensor {
	s := slices.Clone(xs[0].Shape)
	for _, x := range xs[1:] {
		s[axis] += x.Shape[axis]
	}
	return c.out(shaped(s...))
}

func (c *counter) split(x *tensor.Tensor, axis int, sizes ...int) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(sizes))
	total := 0
	for i, n := range sizes {
		s := slices.Clone(x.Shape)
		s[axis] = n
		out[i] = c.out(shaped(s...))
		total += n
	}
	if total != x.Shape[axis] {
		panic(fmt.Sprintf("model: split %v of shape %v along %d", sizes, x.Shape, axis))
	}
	return out
}

func (c *counter) upsample(x *tensor.Tensor, f int) *tensor.Tensor {
	return c.out(shaped(x.Shape[0], x.Shape[1], x.Shape[2]*f, x.Shape[3]*f))
}

func (c *counter) maxPool(x *tensor.Tensor, k, s, p int) *tensor.Tensor {
	return c.out(shaped(x.Shape[0], x.Shape[1], (x.Shape[2]+2*p-k)/s+1, (x.Shape[3]+2*p-k)/s+1))
}

func (c *counter) reshape(x *tensor.Tensor, shape ...int) *tensor.Tensor {
	if prod(shape) != prod(x.Shape) {
		panic(fmt.Sprintf("model: reshape %v to %v", x.Shape, shape))
	}
	return shaped(slices.Clone(shape)...)
}

func (c *counter) matmulT(a, b *tensor.Tensor, transA, transB bool) *tensor.Tensor {
	n := len(a.Shape)
	m, k := a.Shape[n-2], a.Shape[n-1]
	if transA {
		m, k = k, m
	}
	nn := b.Shape[n-1]
	if transB {
		nn = b.Shape[n-2]
	}
	s := slices.Clone(a.Shape)
	s[n-2], s[n-1] = m, nn
	c.f.MatMulMACs += prod(s) * int64(k)
	return c.out(shaped(s...))
}

func (c *counter) softmax(x *tensor.Tensor) *tensor.Tensor          { return c.out(x) }
func (c *counter) scale(x *tensor.Tensor, _ float32) *tensor.Tensor { return c.out(x) }
func (c *counter) detach(x *tensor.Tensor) *tensor.Tensor           { return x }

// CountFLOPs runs the forward over shapes only at batch 1 and an
// imgsz×imgsz input, in train mode (every branch that exists in the tree,
// semantic branch included) or eval mode (no one-to-many, no semseg). It
// returns per-layer and total counts. imgsz must be a positive multiple of 32.
func (m *Model) CountFLOPs(imgsz int, train bool) (total FLOPs, perLayer []FLOPs, err error) {
	if imgsz <= 0 || imgsz%32 != 0 {
		return FLOPs{}, nil, fmt.Errorf("model: image size %d: want a positive multiple of 32", imgsz)
	}
	c := &counter{train: train}
	perLayer = make([]FLOPs, len(m.Layers))
	var last FLOPs
	m.run(c, shaped(1, 3, imgsz, imgsz), func(i int) {
		d := c.f
		d.ConvMACs -= last.ConvMACs
		d.ConvTransposeMACs -= last.ConvTransposeMACs
		d.MatMulMACs -= last.MatMulMACs
		d.BNElements -= last.BNElements
		perLayer[i] = d
		last = c.f
	})
	return c.f, perLayer, nil
}

// ForwardElements is the number of elements the ops of one training
// forward produce per image at an imgsz×imgsz input: what a training step
// holds for its backward pass (four bytes each in fp32), the part of a
// trainer's memory that grows with batch size and image area. imgsz must
// be a positive multiple of 32.
func (m *Model) ForwardElements(imgsz int) (int64, error) {
	if imgsz <= 0 || imgsz%32 != 0 {
		return 0, fmt.Errorf("model: image size %d: want a positive multiple of 32", imgsz)
	}
	c := &counter{train: true}
	m.run(c, shaped(1, 3, imgsz, imgsz), func(int) {})
	return c.outputs, nil
}

// TrainingBytes estimates the live memory a training step of this model
// holds at batch images of imgsz on the CPU backend: four fp32 copies of
// every parameter (weights, gradients, the optimiser's momentum, the EMA)
// and the forward's outputs (ForwardElements an image) with the
// backward's gradients beside them, at their peak half as much again as
// the outputs alone. Measured: `segpipe train --variant n --device cpu` on
// coco-tiny grows by 87 MiB of peak RSS per image of batch at imgsz 256
// (batch 8 → 16), against 58 MiB of outputs an image, 70 MiB once the
// collector's headroom is taken off.
func (m *Model) TrainingBytes(batch, imgsz int) (int64, error) {
	per, err := m.ForwardElements(imgsz)
	if err != nil {
		return 0, err
	}
	if batch < 1 {
		return 0, fmt.Errorf("model: batch size %d: want at least 1", batch)
	}
	return 16*m.NumParams() + 6*int64(batch)*per, nil
}
