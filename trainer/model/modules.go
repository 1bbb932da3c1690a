package model

import (
	"math"

	"github.com/segpipe/segpipe/trainer/tensor"
)

// Param is one named entry of the model's state: a trainable parameter or
// a BatchNorm running statistic. Name is the flat state-dict key of the
// reference implementation (e.g. "model.2.m.0.cv1.conv.weight").
type Param struct {
	Name  string
	Shape []int
	// Buffer marks running statistics: saved in checkpoints, not trained
	// and not counted as parameters.
	Buffer bool
	// Value holds the data; nil in a model built by Describe.
	Value *tensor.Tensor
}

// NumElements is the product of Shape.
func (p *Param) NumElements() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Child is a named sub-module in registration order.
type Child struct {
	Name   string
	Module Module
}

// Module is a node of the model tree. The tree, walked depth-first in
// registration order with Children and LocalParams, yields the state-dict
// keys in the reference order.
type Module interface {
	// Type is the reference class name ("Conv", "C3k2", "Segment26", ...).
	Type() string
	// Children lists sub-modules in registration order.
	Children() []Child
	// LocalParams lists the module's own entries with their local names
	// ("weight", "bias", "running_mean", ...).
	LocalParams() []NamedParam
}

// NamedParam is a Param with its name relative to its module.
type NamedParam struct {
	Local string
	Param *Param
}

// Walk visits m and every descendant depth-first in registration order,
// passing each module's dotted path relative to m ("" for m itself).
func Walk(m Module, fn func(path string, m Module)) {
	walk("", m, fn)
}

func walk(path string, m Module, fn func(string, Module)) {
	fn(path, m)
	for _, c := range m.Children() {
		walk(join(path, c.Name), c.Module, fn)
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// paramsOf lists every Param under m in state-dict order.
func paramsOf(m Module) []*Param {
	var out []*Param
	Walk(m, func(_ string, mm Module) {
		for _, np := range mm.LocalParams() {
			out = append(out, np.Param)
		}
	})
	return out
}

// nameParams assigns each Param its flat key under prefix.
func nameParams(prefix string, m Module) {
	Walk(m, func(path string, mm Module) {
		for _, np := range mm.LocalParams() {
			np.Param.Name = join(join(prefix, path), np.Local)
		}
	})
}

// ---- leaf and composite modules -------------------------------------------

// BatchNorm is BatchNorm2d with eps BNEps and momentum BNMomentum.
type BatchNorm struct {
	C                       int
	Weight, Bias            *Param
	RunningMean, RunningVar *Param
	// NumBatchesTracked counts train-mode forwards; saved as an int64
	// scalar like the reference.
	NumBatchesTracked int64
}

func newBatchNorm(c int) *BatchNorm {
	return &BatchNorm{
		C:           c,
		Weight:      &Param{Shape: []int{c}},
		Bias:        &Param{Shape: []int{c}},
		RunningMean: &Param{Shape: []int{c}, Buffer: true},
		RunningVar:  &Param{Shape: []int{c}, Buffer: true},
	}
}

// Type implements Module.
func (*BatchNorm) Type() string { return "BatchNorm2d" }

// Children implements Module.
func (*BatchNorm) Children() []Child { return nil }

// LocalParams implements Module.
func (b *BatchNorm) LocalParams() []NamedParam {
	return []NamedParam{{"weight", b.Weight}, {"bias", b.Bias}, {"running_mean", b.RunningMean}, {"running_var", b.RunningVar}}
}

// Conv2d is a bare convolution; Bias is nil when it has none. It is the
// "conv" inside a Conv block and the plain last layer of every head branch.
type Conv2d struct {
	C1, C2, K, Stride, Pad, Groups int
	Weight, Bias                   *Param
}

func newConv2d(c1, c2, k, s, g int, bias bool) *Conv2d {
	c := &Conv2d{C1: c1, C2: c2, K: k, Stride: s, Pad: k / 2, Groups: g,
		Weight: &Param{Shape: []int{c2, c1 / g, k, k}}}
	if bias {
		c.Bias = &Param{Shape: []int{c2}}
	}
	return c
}

// Type implements Module.
func (*Conv2d) Type() string { return "Conv2d" }

// Children implements Module.
func (*Conv2d) Children() []Child { return nil }

// LocalParams implements Module.
func (c *Conv2d) LocalParams() []NamedParam {
	if c.Bias == nil {
		return []NamedParam{{"weight", c.Weight}}
	}
	return []NamedParam{{"weight", c.Weight}, {"bias", c.Bias}}
}

// ConvTranspose2d is the stride-2, kernel-2 upsampling convolution of
// Proto26; Weight is [c_in, c_out, k, k].
type ConvTranspose2d struct {
	C1, C2, K, Stride int
	Weight, Bias      *Param
}

// Type implements Module.
func (*ConvTranspose2d) Type() string { return "ConvTranspose2d" }

// Children implements Module.
func (*ConvTranspose2d) Children() []Child { return nil }

// LocalParams implements Module.
func (c *ConvTranspose2d) LocalParams() []NamedParam {
	return []NamedParam{{"weight", c.Weight}, {"bias", c.Bias}}
}

// Conv is the conv → BatchNorm → SiLU block (identity activation when Act
// is false). After fusing, BN is nil and Conv.Conv carries a bias.
type Conv struct {
	Conv *Conv2d
	BN   *BatchNorm
	Act  bool
}

func newConv(c1, c2, k, s, g int, act bool) *Conv {
	return &Conv{Conv: newConv2d(c1, c2, k, s, g, false), BN: newBatchNorm(c2), Act: act}
}

// Type implements Module.
func (*Conv) Type() string { return "Conv" }

// Children implements Module.
func (c *Conv) Children() []Child {
	if c.BN == nil {
		return []Child{{"conv", c.Conv}}
	}
	return []Child{{"conv", c.Conv}, {"bn", c.BN}}
}

// LocalParams implements Module.
func (*Conv) LocalParams() []NamedParam { return nil }

// Sequential runs its children in order; children are named "0", "1", ...
type Sequential struct {
	Items []Module
}

// Type implements Module.
func (*Sequential) Type() string { return "Sequential" }

// Children implements Module.
func (s *Sequential) Children() []Child {
	out := make([]Child, len(s.Items))
	for i, m := range s.Items {
		out[i] = Child{itoa(i), m}
	}
	return out
}

// LocalParams implements Module.
func (*Sequential) LocalParams() []NamedParam { return nil }

// ModuleList holds indexed children that are not run in sequence.
type ModuleList struct{ Items []Module }

// Type implements Module.
func (*ModuleList) Type() string { return "ModuleList" }

// Children implements Module.
func (s *ModuleList) Children() []Child {
	return (*Sequential)(s).Children()
}

// LocalParams implements Module.
func (*ModuleList) LocalParams() []NamedParam { return nil }

// Bottleneck is cv2(cv1(x)), plus x when Add.
type Bottleneck struct {
	Cv1, Cv2 *Conv
	Add      bool
}

func newBottleneck(c1, c2 int, e float64) *Bottleneck {
	h := int(float64(c2) * e)
	return &Bottleneck{Cv1: newConv(c1, h, 3, 1, 1, true), Cv2: newConv(h, c2, 3, 1, 1, true), Add: c1 == c2}
}

// Type implements Module.
func (*Bottleneck) Type() string { return "Bottleneck" }

// Children implements Module.
func (b *Bottleneck) Children() []Child {
	return []Child{{"cv1", b.Cv1}, {"cv2", b.Cv2}}
}

// LocalParams implements Module.
func (*Bottleneck) LocalParams() []NamedParam { return nil }

// C3k is cv3(concat[m(cv1(x)), cv2(x)]) with m a chain of Bottlenecks.
type C3k struct {
	Cv1, Cv2, Cv3 *Conv
	M             *Sequential
}

func newC3k(c1, c2, n int) *C3k {
	c := c2 / 2
	m := &Sequential{}
	for range n {
		m.Items = append(m.Items, newBottleneck(c, c, 1.0))
	}
	return &C3k{Cv1: newConv(c1, c, 1, 1, 1, true), Cv2: newConv(c1, c, 1, 1, 1, true), Cv3: newConv(2*c, c2, 1, 1, 1, true), M: m}
}

// Type implements Module.
func (*C3k) Type() string { return "C3k" }

// Children implements Module.
func (c *C3k) Children() []Child {
	return []Child{{"cv1", c.Cv1}, {"cv2", c.Cv2}, {"cv3", c.Cv3}, {"m", c.M}}
}

// LocalParams implements Module.
func (*C3k) LocalParams() []NamedParam { return nil }

// C3k2 splits cv1's output in halves, chains its blocks from the second
// half and fuses every piece with cv2.
type C3k2 struct {
	Cv1, Cv2 *Conv
	M        *ModuleList // Bottleneck, C3k, or Sequential{Bottleneck, PSABlock}
	Hidden   int         // c: the width of each chunk
}

func newC3k2(c1, c2, n int, c3k bool, e float64, attn bool) *C3k2 {
	c := int(float64(c2) * e)
	m := &ModuleList{}
	for range n {
		switch {
		case attn:
			m.Items = append(m.Items, &Sequential{Items: []Module{newBottleneck(c, c, 0.5), newPSABlock(c, max(c/64, 1))}})
		case c3k:
			m.Items = append(m.Items, newC3k(c, c, 2))
		default:
			m.Items = append(m.Items, newBottleneck(c, c, 0.5))
		}
	}
	return &C3k2{Cv1: newConv(c1, 2*c, 1, 1, 1, true), Cv2: newConv((2+n)*c, c2, 1, 1, 1, true), M: m, Hidden: c}
}

// Type implements Module.
func (*C3k2) Type() string { return "C3k2" }

// Children implements Module.
func (c *C3k2) Children() []Child {
	return []Child{{"cv1", c.Cv1}, {"cv2", c.Cv2}, {"m", c.M}}
}

// LocalParams implements Module.
func (*C3k2) LocalParams() []NamedParam { return nil }

// SPPF is cv2(concat[y, pool(y), pool²(y), pool³(y)]) + x with y = cv1(x).
type SPPF struct {
	Cv1, Cv2 *Conv
	K, N     int
	Add      bool
}

func newSPPF(c1, c2, k, n int, shortcut bool) *SPPF {
	h := c1 / 2
	return &SPPF{Cv1: newConv(c1, h, 1, 1, 1, false), Cv2: newConv(h*(n+1), c2, 1, 1, 1, true), K: k, N: n, Add: shortcut && c1 == c2}
}

// Type implements Module.
func (*SPPF) Type() string { return "SPPF" }

// Children implements Module.
func (s *SPPF) Children() []Child {
	return []Child{{"cv1", s.Cv1}, {"cv2", s.Cv2}}
}

// LocalParams implements Module.
func (*SPPF) LocalParams() []NamedParam { return nil }

// Attention is multi-head self-attention over the spatial positions with a
// depthwise positional encoding of v.
type Attention struct {
	Qkv, Proj, Pe          *Conv
	Heads, KeyDim, HeadDim int
	Scale                  float32
}

func newAttention(dim, heads int) *Attention {
	hd := dim / heads
	kd := hd / 2
	return &Attention{
		Qkv:   newConv(dim, dim+2*kd*heads, 1, 1, 1, false),
		Proj:  newConv(dim, dim, 1, 1, 1, false),
		Pe:    newConv(dim, dim, 3, 1, dim, false),
		Heads: heads, KeyDim: kd, HeadDim: hd,
		Scale: float32(1 / math.Sqrt(float64(kd))),
	}
}

// Type implements Module.
func (*Attention) Type() string { return "Attention" }

// Children implements Module.
func (a *Attention) Children() []Child {
	return []Child{{"qkv", a.Qkv}, {"proj", a.Proj}, {"pe", a.Pe}}
}

// LocalParams implements Module.
func (*Attention) LocalParams() []NamedParam { return nil }

// PSABlock is x + attn(x), then + ffn(x).
type PSABlock struct {
	Attn *Attention
	Ffn  *Sequential // Conv(c, 2c) SiLU, Conv(2c, c) no-act
}

func newPSABlock(c, heads int) *PSABlock {
	return &PSABlock{Attn: newAttention(c, heads), Ffn: &Sequential{Items: []Module{newConv(c, 2*c, 1, 1, 1, true), newConv(2*c, c, 1, 1, 1, false)}}}
}

// Type implements Module.
func (*PSABlock) Type() string { return "PSABlock" }

// Children implements Module.
func (p *PSABlock) Children() []Child {
	return []Child{{"attn", p.Attn}, {"ffn", p.Ffn}}
}

// LocalParams implements Module.
func (*PSABlock) LocalParams() []NamedParam { return nil }

// C2PSA splits cv1's output into [a, b], runs b through PSABlocks and
// fuses concat[a, b] with cv2.
type C2PSA struct {
	Cv1, Cv2 *Conv
	M        *Sequential
	Hidden   int
}

func newC2PSA(c1, n int) *C2PSA {
	c := c1 / 2
	m := &Sequential{}
	for range n {
		m.Items = append(m.Items, newPSABlock(c, c/64))
	}
	return &C2PSA{Cv1: newConv(c1, 2*c, 1, 1, 1, true), Cv2: newConv(2*c, c1, 1, 1, 1, true), M: m, Hidden: c}
}

// Type implements Module.
func (*C2PSA) Type() string { return "C2PSA" }

// Children implements Module.
func (c *C2PSA) Children() []Child {
	return []Child{{"cv1", c.Cv1}, {"cv2", c.Cv2}, {"m", c.M}}
}

// LocalParams implements Module.
func (*C2PSA) LocalParams() []NamedParam { return nil }

// Upsample is nearest-neighbour upsampling by Factor.
type Upsample struct{ Factor int }

// Type implements Module.
func (*Upsample) Type() string { return "Upsample" }

// Children implements Module.
func (*Upsample) Children() []Child { return nil }

// LocalParams implements Module.
func (*Upsample) LocalParams() []NamedParam { return nil }

// Concat joins its inputs along channels in "from" order.
type Concat struct{}

// Type implements Module.
func (*Concat) Type() string { return "Concat" }

// Children implements Module.
func (*Concat) Children() []Child { return nil }

// LocalParams implements Module.
func (*Concat) LocalParams() []NamedParam { return nil }

// Proto26 makes the mask prototypes at stride 4 from the three neck maps
// and, in the full model only, the semantic-segmentation logits at stride 8.
type Proto26 struct {
	Cv1        *Conv
	Upsample   *ConvTranspose2d
	Cv2, Cv3   *Conv
	FeatRefine *ModuleList // Conv(ch1→ch0), Conv(ch2→ch0)
	FeatFuse   *Conv
	// Semseg is the training-only auxiliary branch; nil when deployed.
	Semseg *Sequential
}

// Type implements Module.
func (*Proto26) Type() string { return "Proto26" }

// Children implements Module.
func (p *Proto26) Children() []Child {
	c := []Child{{"cv1", p.Cv1}, {"upsample", p.Upsample}, {"cv2", p.Cv2}, {"cv3", p.Cv3}, {"feat_refine", p.FeatRefine}, {"feat_fuse", p.FeatFuse}}
	if p.Semseg != nil {
		c = append(c, Child{"semseg", p.Semseg})
	}
	return c
}

// LocalParams implements Module.
func (*Proto26) LocalParams() []NamedParam { return nil }

// Segment26 is the end-to-end segmentation head: per level, a box, a class
// and a mask-coefficient branch, in a one-to-many set (training only) and a
// one-to-one set, plus Proto26.
type Segment26 struct {
	Classes int
	// One-to-many branches, one Sequential per level; nil when deployed.
	Cv2, Cv3, Cv4 *ModuleList
	// One-to-one branches, used for inference.
	O2OCv2, O2OCv3, O2OCv4 *ModuleList
	Proto                  *Proto26
}

// Type implements Module.
func (*Segment26) Type() string { return "Segment26" }

// Children implements Module.
func (h *Segment26) Children() []Child {
	var c []Child
	if h.Cv2 != nil {
		c = append(c, Child{"cv2", h.Cv2}, Child{"cv3", h.Cv3})
	}
	c = append(c, Child{"one2one_cv2", h.O2OCv2}, Child{"one2one_cv3", h.O2OCv3}, Child{"proto", h.Proto})
	if h.Cv4 != nil {
		c = append(c, Child{"cv4", h.Cv4})
	}
	return append(c, Child{"one2one_cv4", h.O2OCv4})
}

// LocalParams implements Module.
func (*Segment26) LocalParams() []NamedParam { return nil }
