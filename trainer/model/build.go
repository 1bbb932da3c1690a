package model

import (
	"fmt"
	"strconv"
	"strings"
)

func itoa(i int) string { return strconv.Itoa(i) }

// Layer is one entry of the top-level layer list (the reference's
// "model.<Index>"): a module, the layers it reads and how it was built.
type Layer struct {
	Index   int
	From    []int // -1 is the previous layer
	Repeats int   // inner block count passed to the module
	Module  Module
	Args    string // the resolved constructor arguments, for summaries
	OutCh   int
}

// Model is a YOLO26-seg network: 24 layers whose last is the Segment26 head.
// Build one with New (weights allocated and initialised) or Describe
// (shapes only, for counting). Deploy derives the inference model.
type Model struct {
	Config Config
	Scale  Scale
	Layers []*Layer
	// Deployed is set on models returned by Deploy: no one-to-many branches,
	// no semantic branch.
	Deployed bool
	// Fused is set when BatchNorm has been folded into the convolutions.
	Fused bool
}

// Head returns the Segment26 head.
func (m *Model) Head() *Segment26 { return m.Layers[len(m.Layers)-1].Module.(*Segment26) }

// layerSpec is one yaml row before scaling.
type layerSpec struct {
	from []int
	n    int
	kind string
	ch   int // yaml output channels (before width)
	k, s int
	c3k  bool
	e    float64
	attn bool
}

// yolo26Seg is the upstream yolo26-seg.yaml layout (backbone and neck).
var yolo26Seg = []layerSpec{
	{from: []int{-1}, n: 1, kind: "Conv", ch: 64, k: 3, s: 2},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 128, k: 3, s: 2},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 256, c3k: false, e: 0.25},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 256, k: 3, s: 2},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 512, c3k: false, e: 0.25},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 512, k: 3, s: 2},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 512, c3k: true, e: 0.5},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 1024, k: 3, s: 2},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 1024, c3k: true, e: 0.5},
	{from: []int{-1}, n: 1, kind: "SPPF", ch: 1024, k: 5},
	{from: []int{-1}, n: 2, kind: "C2PSA", ch: 1024},
	{from: []int{-1}, n: 1, kind: "Upsample"},
	{from: []int{-1, 6}, n: 1, kind: "Concat"},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 512, c3k: true, e: 0.5},
	{from: []int{-1}, n: 1, kind: "Upsample"},
	{from: []int{-1, 4}, n: 1, kind: "Concat"},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 256, c3k: true, e: 0.5},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 256, k: 3, s: 2},
	{from: []int{-1, 13}, n: 1, kind: "Concat"},
	{from: []int{-1}, n: 2, kind: "C3k2", ch: 512, c3k: true, e: 0.5},
	{from: []int{-1}, n: 1, kind: "Conv", ch: 512, k: 3, s: 2},
	{from: []int{-1, 10}, n: 1, kind: "Concat"},
	{from: []int{-1}, n: 1, kind: "C3k2", ch: 1024, c3k: true, e: 0.5, attn: true},
}

// headFrom are the neck layers feeding Segment26 (P3, P4, P5).
var headFrom = []int{16, 19, 22}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Describe builds the module tree of a family member with shapes but no
// weights: enough for names, parameter counts, FLOPs and summaries, at no
// memory cost.
func Describe(cfg Config) (*Model, error) {
	cfg, sc, err := cfg.normalised()
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Scale: sc}
	outCh := make([]int, 0, len(yolo26Seg)+1)
	prev := 3
	for i, ls := range yolo26Seg {
		c1 := prev
		if ls.from[0] != -1 {
			c1 = outCh[ls.from[0]]
		}
		l := &Layer{Index: i, From: ls.from, Repeats: sc.repeats(ls.n)}
		switch ls.kind {
		case "Conv":
			c2 := sc.channels(ls.ch)
			l.Module = newConv(c1, c2, ls.k, ls.s, 1, true)
			l.Args = fmt.Sprintf("[%d, %d, %d, %d]", c1, c2, ls.k, ls.s)
			l.OutCh = c2
		case "C3k2":
			c2 := sc.channels(ls.ch)
			c3k := ls.c3k || sc.ForceC3k
			l.Module = newC3k2(c1, c2, l.Repeats, c3k, ls.e, ls.attn)
			args := []string{itoa(c1), itoa(c2), itoa(l.Repeats), pyBool(c3k)}
			if ls.e != 0.5 || ls.attn {
				args = append(args, fmtFloat(ls.e))
			}
			if ls.attn {
				args = append(args, "True")
			}
			l.Args = "[" + strings.Join(args, ", ") + "]"
			l.OutCh = c2
		case "SPPF":
			c2 := sc.channels(ls.ch)
			l.Module = newSPPF(c1, c2, ls.k, 3, true)
			l.Args = fmt.Sprintf("[%d, %d, %d, 3, True]", c1, c2, ls.k)
			l.OutCh = c2
		case "C2PSA":
			c2 := sc.channels(ls.ch)
			if c1 != c2 {
				return nil, fmt.Errorf("model: layer %d: C2PSA needs equal channels, got %d → %d", i, c1, c2)
			}
			l.Module = newC2PSA(c1, l.Repeats)
			l.Args = fmt.Sprintf("[%d, %d, %d]", c1, c2, l.Repeats)
			l.OutCh = c2
		case "Upsample":
			l.Module = &Upsample{Factor: 2}
			l.Args = "[None, 2, 'nearest']"
			l.OutCh = c1
		case "Concat":
			sum := 0
			for _, f := range ls.from {
				if f == -1 {
					sum += prev
				} else {
					sum += outCh[f]
				}
			}
			l.Module = &Concat{}
			l.Args = "[1]"
			l.OutCh = sum
		}
		outCh = append(outCh, l.OutCh)
		prev = l.OutCh
		m.Layers = append(m.Layers, l)
	}
	ch := [3]int{outCh[headFrom[0]], outCh[headFrom[1]], outCh[headFrom[2]]}
	npr := sc.channels(256)
	head := newSegment26(cfg.Classes, npr, ch)
	m.Layers = append(m.Layers, &Layer{
		Index: len(m.Layers), From: headFrom, Repeats: 1, Module: head,
		Args: fmt.Sprintf("[%d, %d, %d, [%d, %d, %d]]", cfg.Classes, NumMasks, npr, ch[0], ch[1], ch[2]),
	})
	m.nameParams()
	return m, nil
}

// nameParams gives every Param its flat reference key.
func (m *Model) nameParams() {
	for _, l := range m.Layers {
		nameParams("model."+itoa(l.Index), l.Module)
	}
}

// newSegment26 builds the head for nc classes over neck channels ch.
func newSegment26(nc, npr int, ch [3]int) *Segment26 {
	c2 := max(16, ch[0]/4, 4)
	c3 := max(ch[0], min(nc, 100))
	c4 := max(ch[0]/4, NumMasks)
	box := func() *ModuleList {
		l := &ModuleList{}
		for _, x := range ch {
			l.Items = append(l.Items, &Sequential{Items: []Module{
				newConv(x, c2, 3, 1, 1, true), newConv(c2, c2, 3, 1, 1, true), newConv2d(c2, 4, 1, 1, 1, true)}})
		}
		return l
	}
	cls := func() *ModuleList {
		l := &ModuleList{}
		for _, x := range ch {
			l.Items = append(l.Items, &Sequential{Items: []Module{
				&Sequential{Items: []Module{newConv(x, x, 3, 1, x, true), newConv(x, c3, 1, 1, 1, true)}},
				&Sequential{Items: []Module{newConv(c3, c3, 3, 1, c3, true), newConv(c3, c3, 1, 1, 1, true)}},
				newConv2d(c3, nc, 1, 1, 1, true)}})
		}
		return l
	}
	mask := func() *ModuleList {
		l := &ModuleList{}
		for _, x := range ch {
			l.Items = append(l.Items, &Sequential{Items: []Module{
				newConv(x, c4, 3, 1, 1, true), newConv(c4, c4, 3, 1, 1, true), newConv2d(c4, NumMasks, 1, 1, 1, true)}})
		}
		return l
	}
	proto := &Proto26{
		Cv1:        newConv(npr, npr, 3, 1, 1, true),
		Upsample:   &ConvTranspose2d{C1: npr, C2: npr, K: 2, Stride: 2, Weight: &Param{Shape: []int{npr, npr, 2, 2}}, Bias: &Param{Shape: []int{npr}}},
		Cv2:        newConv(npr, npr, 3, 1, 1, true),
		Cv3:        newConv(npr, NumMasks, 1, 1, 1, true),
		FeatRefine: &ModuleList{Items: []Module{newConv(ch[1], ch[0], 1, 1, 1, true), newConv(ch[2], ch[0], 1, 1, 1, true)}},
		FeatFuse:   newConv(ch[0], npr, 3, 1, 1, true),
		Semseg: &Sequential{Items: []Module{
			newConv(ch[0], npr, 3, 1, 1, true), newConv(npr, npr, 3, 1, 1, true), newConv2d(npr, nc, 1, 1, 1, true)}},
	}
	return &Segment26{Classes: nc, Cv2: box(), Cv3: cls(), Cv4: mask(), O2OCv2: box(), O2OCv3: cls(), O2OCv4: mask(), Proto: proto}
}

// Params lists every trainable parameter in state-dict order.
func (m *Model) Params() []*Param {
	var out []*Param
	for _, p := range m.State() {
		if !p.Buffer {
			out = append(out, p)
		}
	}
	return out
}

// State lists parameters and running statistics in state-dict order
// (num_batches_tracked counters excluded; see BatchNorms).
func (m *Model) State() []*Param {
	var out []*Param
	for _, l := range m.Layers {
		out = append(out, paramsOf(l.Module)...)
	}
	return out
}

// BatchNorms lists every BatchNorm with its flat key prefix
// ("model.0.bn"), in state-dict order.
func (m *Model) BatchNorms() []NamedBN {
	var out []NamedBN
	for _, l := range m.Layers {
		Walk(l.Module, func(path string, mm Module) {
			if bn, ok := mm.(*BatchNorm); ok {
				out = append(out, NamedBN{Prefix: join("model."+itoa(l.Index), path), BN: bn})
			}
		})
	}
	return out
}

// NamedBN is a BatchNorm with its key prefix.
type NamedBN struct {
	Prefix string
	BN     *BatchNorm
}

// StateKeys lists every state-dict key in reference order, including the
// num_batches_tracked counters.
func (m *Model) StateKeys() []string {
	var out []string
	for _, p := range m.State() {
		out = append(out, p.Name)
		if strings.HasSuffix(p.Name, ".running_var") {
			out = append(out, strings.TrimSuffix(p.Name, "running_var")+"num_batches_tracked")
		}
	}
	return out
}

// NumParams is the number of trainable scalars.
func (m *Model) NumParams() int64 {
	var n int64
	for _, p := range m.Params() {
		n += int64(p.NumElements())
	}
	return n
}

// LayerParams is the number of trainable scalars of layer i.
func (m *Model) LayerParams(i int) int64 {
	var n int64
	for _, p := range paramsOf(m.Layers[i].Module) {
		if !p.Buffer {
			n += int64(p.NumElements())
		}
	}
	return n
}
