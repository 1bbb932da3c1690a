package model

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/tensor"
)

// Deploy returns the inference model: the same layers without the
// one-to-many head branches and without Proto26's semantic branch. The
// deployed tree shares every module and *Param it keeps with m, so
// training m changes the deployed model too. With fuse, every Conv's
// BatchNorm is folded into a new biased convolution (using the current
// running statistics), the only parameters the result does not share;
// fusing needs weights unless m was built by Describe, in which case the
// fused model is shapes-only too.
func (m *Model) Deploy(fuse bool) (*Model, error) {
	if m.Fused {
		return nil, fmt.Errorf("model: deploy a model before fusing it")
	}
	d := &Model{Config: m.Config, Scale: m.Scale, Deployed: true}
	last := len(m.Layers) - 1
	d.Layers = append(d.Layers, m.Layers[:last]...)
	h := m.Head()
	p := h.Proto
	dh := &Segment26{
		Classes: h.Classes,
		O2OCv2:  h.O2OCv2, O2OCv3: h.O2OCv3, O2OCv4: h.O2OCv4,
		Proto: &Proto26{Cv1: p.Cv1, Upsample: p.Upsample, Cv2: p.Cv2, Cv3: p.Cv3, FeatRefine: p.FeatRefine, FeatFuse: p.FeatFuse},
	}
	hl := *m.Layers[last]
	hl.Module = dh
	d.Layers = append(d.Layers, &hl)
	if !fuse {
		return d, nil
	}
	return d.Fuse()
}

// Fuse returns a copy of the model in which every Conv's BatchNorm is
// folded into a new biased convolution, using the current running
// statistics. Modules without BatchNorm (plain convs, the transposed conv)
// and their parameters are shared. A fused model runs only in Eval mode.
func (m *Model) Fuse() (*Model, error) {
	if m.Fused {
		return nil, fmt.Errorf("model: already fused")
	}
	d := &Model{Config: m.Config, Scale: m.Scale, Deployed: m.Deployed, Fused: true}
	alloc := m.HasWeights()
	for _, l := range m.Layers {
		nl := *l
		nl.Module = fuseModule(l.Module, alloc)
		d.Layers = append(d.Layers, &nl)
	}
	d.nameParams()
	if alloc {
		for _, p := range d.State() {
			p.Value.Name = p.Name
		}
	}
	return d, nil
}

// fuseModule returns a copy of mm in which every Conv block has its BN
// folded into the convolution; modules without BN are returned as is.
func fuseModule(mm Module, alloc bool) Module {
	f := func(x Module) Module { return fuseModule(x, alloc) }
	fc := func(c *Conv) *Conv { return f(c).(*Conv) }
	list := func(items []Module) []Module {
		out := make([]Module, len(items))
		for i, x := range items {
			out[i] = f(x)
		}
		return out
	}
	switch c := mm.(type) {
	case *Conv:
		return fuseConv(c, alloc)
	case *Sequential:
		return &Sequential{Items: list(c.Items)}
	case *ModuleList:
		return &ModuleList{Items: list(c.Items)}
	case *Bottleneck:
		return &Bottleneck{Cv1: fc(c.Cv1), Cv2: fc(c.Cv2), Add: c.Add}
	case *C3k:
		return &C3k{Cv1: fc(c.Cv1), Cv2: fc(c.Cv2), Cv3: fc(c.Cv3), M: f(c.M).(*Sequential)}
	case *C3k2:
		return &C3k2{Cv1: fc(c.Cv1), Cv2: fc(c.Cv2), M: f(c.M).(*ModuleList), Hidden: c.Hidden}
	case *SPPF:
		return &SPPF{Cv1: fc(c.Cv1), Cv2: fc(c.Cv2), K: c.K, N: c.N, Add: c.Add}
	case *Attention:
		a := *c
		a.Qkv, a.Proj, a.Pe = fc(c.Qkv), fc(c.Proj), fc(c.Pe)
		return &a
	case *PSABlock:
		return &PSABlock{Attn: f(c.Attn).(*Attention), Ffn: f(c.Ffn).(*Sequential)}
	case *C2PSA:
		return &C2PSA{Cv1: fc(c.Cv1), Cv2: fc(c.Cv2), M: f(c.M).(*Sequential), Hidden: c.Hidden}
	case *Proto26:
		p := &Proto26{Cv1: fc(c.Cv1), Upsample: c.Upsample, Cv2: fc(c.Cv2), Cv3: fc(c.Cv3),
			FeatRefine: f(c.FeatRefine).(*ModuleList), FeatFuse: fc(c.FeatFuse)}
		if c.Semseg != nil {
			p.Semseg = f(c.Semseg).(*Sequential)
		}
		return p
	case *Segment26:
		h := &Segment26{Classes: c.Classes, Proto: f(c.Proto).(*Proto26)}
		if c.Cv2 != nil {
			h.Cv2, h.Cv3, h.Cv4 = f(c.Cv2).(*ModuleList), f(c.Cv3).(*ModuleList), f(c.Cv4).(*ModuleList)
		}
		h.O2OCv2, h.O2OCv3, h.O2OCv4 = f(c.O2OCv2).(*ModuleList), f(c.O2OCv3).(*ModuleList), f(c.O2OCv4).(*ModuleList)
		return h
	}
	return mm // Conv2d, ConvTranspose2d, Upsample, Concat: nothing to fold
}

// fuseConv folds BN into the convolution:
// w' = w·γ/√(σ²+ε) per output channel, b' = β − μ·γ/√(σ²+ε).
func fuseConv(c *Conv, alloc bool) *Conv {
	if c.BN == nil {
		return c
	}
	cv := c.Conv
	nc := newConv2d(cv.C1, cv.C2, cv.K, cv.Stride, cv.Groups, true)
	if alloc {
		// Fusing is a one-off export step, done on host copies.
		bn := c.BN
		gamma, beta := bn.Weight.Value.ToHost(nil), bn.Bias.Value.ToHost(nil)
		mean, variance := bn.RunningMean.Value.ToHost(nil), bn.RunningVar.Value.ToHost(nil)
		cw := cv.Weight.Value.ToHost(nil)
		w := make([]float32, len(cw))
		b := make([]float32, cv.C2)
		per := len(w) / cv.C2
		for o := 0; o < cv.C2; o++ {
			s := float64(gamma[o]) / math.Sqrt(float64(variance[o])+BNEps)
			for j := o * per; j < (o+1)*per; j++ {
				w[j] = float32(float64(cw[j]) * s)
			}
			b[o] = float32(float64(beta[o]) - float64(mean[o])*s)
		}
		be := cv.Weight.Value.Backend()
		nc.Weight.Value = tensor.Upload(be, w, nc.Weight.Shape...)
		nc.Bias.Value = tensor.Upload(be, b, nc.Bias.Shape...)
	}
	return &Conv{Conv: nc, Act: c.Act}
}

// TrainingOnly lists the modules Deploy removes: the one-to-many branch
// lists and the semantic branch (nil entries omitted).
func (m *Model) TrainingOnly() []Module {
	h := m.Head()
	var out []Module
	for _, x := range []Module{h.Cv2, h.Cv3, h.Cv4} {
		if l, ok := x.(*ModuleList); ok && l != nil {
			out = append(out, l)
		}
	}
	if h.Proto.Semseg != nil {
		out = append(out, h.Proto.Semseg)
	}
	return out
}

// PartParams returns the parameters of the one-to-many branches and of the
// auxiliary semantic branch (both zero on a deployed model).
func (m *Model) PartParams() (o2m, aux int64) {
	h := m.Head()
	count := func(mm Module) int64 {
		var n int64
		for _, p := range paramsOf(mm) {
			if !p.Buffer {
				n += int64(p.NumElements())
			}
		}
		return n
	}
	if h.Cv2 != nil {
		o2m = count(h.Cv2) + count(h.Cv3) + count(h.Cv4)
	}
	if h.Proto.Semseg != nil {
		aux = count(h.Proto.Semseg)
	}
	return o2m, aux
}
