package model

import "github.com/segpipe/segpipe/trainer/tensor"

// ops is what the forward code needs from an executor. Two implement it:
// the tensor executor (real arithmetic on a tape) and the counter (shapes
// and MACs only, tensors with nil Data). Writing the forward once against
// this interface keeps the FLOP count tied to the executed graph.
type ops interface {
	training() bool
	conv2d(x *tensor.Tensor, c *Conv2d) *tensor.Tensor
	convTranspose2d(x *tensor.Tensor, c *ConvTranspose2d) *tensor.Tensor
	// batchNorm normalises x, then applies SiLU when silu is set (one op
	// where the backend fuses them).
	batchNorm(x *tensor.Tensor, bn *BatchNorm, silu bool) *tensor.Tensor
	silu(x *tensor.Tensor) *tensor.Tensor
	add(a, b *tensor.Tensor) *tensor.Tensor
	concat(axis int, xs ...*tensor.Tensor) *tensor.Tensor
	split(x *tensor.Tensor, axis int, sizes ...int) []*tensor.Tensor
	upsample(x *tensor.Tensor, factor int) *tensor.Tensor
	maxPool(x *tensor.Tensor, k, stride, pad int) *tensor.Tensor
	reshape(x *tensor.Tensor, shape ...int) *tensor.Tensor
	// matmulT is a batched matmul over the last two axes, reading a as
	// [..., K, M] when transA and b as [..., N, K] when transB.
	matmulT(a, b *tensor.Tensor, transA, transB bool) *tensor.Tensor
	softmax(x *tensor.Tensor) *tensor.Tensor // over the last axis
	scale(x *tensor.Tensor, s float32) *tensor.Tensor
	detach(x *tensor.Tensor) *tensor.Tensor
}

// runner is a module that maps one tensor to one tensor.
type runner interface {
	forward(e ops, x *tensor.Tensor) *tensor.Tensor
}

func (c *Conv2d) forward(e ops, x *tensor.Tensor) *tensor.Tensor { return e.conv2d(x, c) }

func (c *ConvTranspose2d) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	return e.convTranspose2d(x, c)
}

func (c *Conv) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	y := e.conv2d(x, c.Conv)
	switch {
	case c.BN != nil:
		y = e.batchNorm(y, c.BN, c.Act)
	case c.Act:
		y = e.silu(y)
	}
	return y
}

func (s *Sequential) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	for _, m := range s.Items {
		x = m.(runner).forward(e, x)
	}
	return x
}

func (b *Bottleneck) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	y := b.Cv2.forward(e, b.Cv1.forward(e, x))
	if b.Add {
		y = e.add(x, y)
	}
	return y
}

func (c *C3k) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	a := c.M.forward(e, c.Cv1.forward(e, x))
	return c.Cv3.forward(e, e.concat(1, a, c.Cv2.forward(e, x)))
}

func (c *C3k2) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	y := e.split(c.Cv1.forward(e, x), 1, c.Hidden, c.Hidden)
	for _, m := range c.M.Items {
		y = append(y, m.(runner).forward(e, y[len(y)-1]))
	}
	return c.Cv2.forward(e, e.concat(1, y...))
}

func (s *SPPF) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	y := []*tensor.Tensor{s.Cv1.forward(e, x)}
	for range s.N {
		y = append(y, e.maxPool(y[len(y)-1], s.K, 1, s.K/2))
	}
	out := s.Cv2.forward(e, e.concat(1, y...))
	if s.Add {
		out = e.add(out, x)
	}
	return out
}

func (a *Attention) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	b, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	n := h * w
	qkv := e.reshape(a.Qkv.forward(e, x), b, a.Heads, 2*a.KeyDim+a.HeadDim, n)
	parts := e.split(qkv, 2, a.KeyDim, a.KeyDim, a.HeadDim)
	q, k, v := parts[0], parts[1], parts[2]
	attn := e.softmax(e.scale(e.matmulT(q, k, true, false), a.Scale)) // qᵀk: [B, heads, N, N]
	y := e.reshape(e.matmulT(v, attn, false, true), b, c, h, w)       // v·attnᵀ
	y = e.add(y, a.Pe.forward(e, e.reshape(v, b, c, h, w)))
	return a.Proj.forward(e, y)
}

func (p *PSABlock) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	x = e.add(x, p.Attn.forward(e, x))
	return e.add(x, p.Ffn.forward(e, x))
}

func (c *C2PSA) forward(e ops, x *tensor.Tensor) *tensor.Tensor {
	ab := e.split(c.Cv1.forward(e, x), 1, c.Hidden, c.Hidden)
	return c.Cv2.forward(e, e.concat(1, ab[0], c.M.forward(e, ab[1])))
}

// protoOut is Proto26's result; semseg is nil outside training or when
// the branch was removed.
type protoOut struct{ proto, semseg *tensor.Tensor }

func (p *Proto26) forward(e ops, feats [3]*tensor.Tensor) protoOut {
	f := e.add(feats[0], e.upsample(p.FeatRefine.Items[0].(*Conv).forward(e, feats[1]), 2))
	f = e.add(f, e.upsample(p.FeatRefine.Items[1].(*Conv).forward(e, feats[2]), 4))
	y := p.FeatFuse.forward(e, f)
	y = p.Cv3.forward(e, p.Cv2.forward(e, p.Upsample.forward(e, p.Cv1.forward(e, y))))
	out := protoOut{proto: y}
	if p.Semseg != nil && e.training() {
		out.semseg = p.Semseg.forward(e, f)
	}
	return out
}

// branchSet runs one set of box/class/mask branches over the three levels
// and concatenates the flattened levels along the anchor axis.
func branchSet(e ops, box, cls, mask *ModuleList, feats [3]*tensor.Tensor) Branch {
	run := func(l *ModuleList) *tensor.Tensor {
		var parts [3]*tensor.Tensor
		for i, f := range feats {
			y := l.Items[i].(runner).forward(e, f)
			parts[i] = e.reshape(y, y.Shape[0], y.Shape[1], y.Shape[2]*y.Shape[3])
		}
		return e.concat(2, parts[:]...)
	}
	return Branch{Boxes: run(box), Scores: run(cls), MaskCoefficients: run(mask)}
}

func (h *Segment26) forward(e ops, feats [3]*tensor.Tensor) *Output {
	out := &Output{Feats: feats}
	pr := h.Proto.forward(e, feats)
	out.Proto, out.Semseg = pr.proto, pr.semseg
	if e.training() && h.Cv2 != nil {
		o2m := branchSet(e, h.Cv2, h.Cv3, h.Cv4, feats)
		out.One2Many = &o2m
	}
	var det [3]*tensor.Tensor
	for i, f := range feats {
		det[i] = e.detach(f)
	}
	out.One2One = branchSet(e, h.O2OCv2, h.O2OCv3, h.O2OCv4, det)
	return out
}

func (l *Layer) forward(e ops, ys []*tensor.Tensor, prev *tensor.Tensor) *tensor.Tensor {
	in := func(f int) *tensor.Tensor {
		if f == -1 {
			return prev
		}
		return ys[f]
	}
	switch m := l.Module.(type) {
	case *Concat:
		xs := make([]*tensor.Tensor, len(l.From))
		for i, f := range l.From {
			xs[i] = in(f)
		}
		return e.concat(1, xs...)
	case *Upsample:
		return e.upsample(in(l.From[0]), m.Factor)
	case runner:
		return m.forward(e, in(l.From[0]))
	}
	panic("model: layer " + itoa(l.Index) + " has no forward")
}

// run executes the whole network; hook, when non-nil, is called after each
// layer (the counter uses it to attribute FLOPs).
func (m *Model) run(e ops, x *tensor.Tensor, hook func(layer int)) *Output {
	ys := make([]*tensor.Tensor, len(m.Layers))
	prev := x
	last := len(m.Layers) - 1
	for i, l := range m.Layers[:last] {
		prev = l.forward(e, ys, prev)
		ys[i] = prev
		if hook != nil {
			hook(i)
		}
	}
	h := m.Layers[last]
	out := m.Head().forward(e, [3]*tensor.Tensor{ys[h.From[0]], ys[h.From[1]], ys[h.From[2]]})
	if hook != nil {
		hook(last)
	}
	return out
}
