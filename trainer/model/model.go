package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// ErrNoWeights is returned when an operation needs weights and the model
// was built by Describe.
var ErrNoWeights = errors.New("model: weights not allocated (built by Describe)")

// New builds a family member with allocated weights, initialised like the
// reference: kaiming-uniform (a = √5) conv weights, uniform conv biases,
// BatchNorm weight 1 / bias 0 / running mean 0 / running variance 1, box
// biases 2.0, class biases ln(5/nc/(640/stride)²), and one-to-one branches
// that start as exact copies of the one-to-many ones. cfg.Seed makes the
// result deterministic.
func New(cfg Config) (*Model, error) {
	m, err := Describe(cfg)
	if err != nil {
		return nil, err
	}
	m.allocate()
	m.initialise(rand.New(rand.NewPCG(m.Config.Seed, 0x5e9919e)))
	return m, nil
}

// allocate gives every Param a zeroed tensor on the process-wide CPU
// backend (the initialisation writes host views; To moves them);
// parameters require grad.
func (m *Model) allocate() {
	host := cpu.Default()
	for _, p := range m.State() {
		if p.Value != nil {
			continue
		}
		if p.Buffer {
			p.Value = tensor.ZerosOn(host, p.Shape...)
			p.Value.Name = p.Name
		} else {
			p.Value = tensor.ParamOn(host, p.Name, p.Shape...)
		}
	}
}

// HasWeights reports whether every entry has data.
func (m *Model) HasWeights() bool {
	for _, p := range m.State() {
		if p.Value == nil {
			return false
		}
	}
	return true
}

// New initialises on the CPU backend (see To), so these write host views.
func uniform(r *rand.Rand, t *tensor.Tensor, bound float64) {
	d := t.Host()
	for i := range d {
		d[i] = float32((2*r.Float64() - 1) * bound)
	}
}

func (m *Model) initialise(r *rand.Rand) {
	for _, l := range m.Layers {
		Walk(l.Module, func(_ string, mm Module) {
			switch c := mm.(type) {
			case *Conv2d:
				fanIn := c.C1 / c.Groups * c.K * c.K
				bound := 1 / math.Sqrt(float64(fanIn))
				uniform(r, c.Weight.Value, bound)
				if c.Bias != nil {
					uniform(r, c.Bias.Value, bound)
				}
			case *ConvTranspose2d:
				// PyTorch's fan-in of a transposed conv weight [c_in, c_out, k, k]
				// is c_out·k².
				bound := 1 / math.Sqrt(float64(c.C2*c.K*c.K))
				uniform(r, c.Weight.Value, bound)
				uniform(r, c.Bias.Value, bound)
			case *BatchNorm:
				fill(c.Weight.Value, 1)
				fill(c.Bias.Value, 0)
				fill(c.RunningMean.Value, 0)
				fill(c.RunningVar.Value, 1)
				c.NumBatchesTracked = 0
			}
		})
	}
	h := m.Head()
	for i, s := range Strides {
		fill(h.Cv2.Items[i].(*Sequential).Items[2].(*Conv2d).Bias.Value, 2)
		cls := math.Log(5 / float64(h.Classes) / math.Pow(640/float64(s), 2))
		fill(h.Cv3.Items[i].(*Sequential).Items[2].(*Conv2d).Bias.Value, float32(cls))
	}
	for _, pair := range [][2]*ModuleList{{h.Cv2, h.O2OCv2}, {h.Cv3, h.O2OCv3}, {h.Cv4, h.O2OCv4}} {
		src, dst := paramsOf(pair[0]), paramsOf(pair[1])
		for i := range src {
			copy(dst[i].Value.Host(), src[i].Value.Host())
		}
	}
}

func fill(t *tensor.Tensor, v float32) { t.Backend().Fill(t.Buffer(), v) }

// To moves every parameter and running statistic to be, once, so that the
// model runs on the run's backend: Forward then needs its input there too.
// Gradients are not moved (they are allocated on first use).
func (m *Model) To(be backend.Backend) {
	if be == nil {
		return
	}
	for _, p := range m.State() {
		if p.Value == nil || p.Value.Backend() == be {
			continue
		}
		t := tensor.Upload(be, p.Value.ToHost(nil), p.Shape...)
		t.Name, t.RequiresGrad = p.Value.Name, p.Value.RequiresGrad
		p.Value = t
	}
}

// Backend returns the backend the model's weights live on (nil without
// weights).
func (m *Model) Backend() backend.Backend {
	for _, p := range m.State() {
		if p.Value != nil {
			return p.Value.Backend()
		}
	}
	return nil
}

// Mode selects train or eval behaviour of Forward.
type Mode int

const (
	// Train uses batch statistics in BatchNorm (and updates the running
	// ones) and runs every branch the model has.
	Train Mode = iota
	// Eval uses running statistics and runs only the inference path.
	Eval
)

// Forward runs the network on x [B, 3, H, W] (H and W positive multiples
// of 32) on tape tp (nil: no_grad), on the backend the model and x live on. Train mode updates
// the BatchNorm running statistics in place, as the reference does.
func (m *Model) Forward(tp *tensor.Tape, x *tensor.Tensor, mode Mode) (*Output, error) {
	if x == nil || len(x.Shape) != 4 || x.Shape[1] != 3 || x.Shape[0] < 1 {
		return nil, fmt.Errorf("model: input must be [B, 3, H, W] with B ≥ 1, got %v", shapeOrNil(x))
	}
	if h, w := x.Shape[2], x.Shape[3]; h <= 0 || w <= 0 || h%32 != 0 || w%32 != 0 {
		return nil, fmt.Errorf("model: input size %dx%d: height and width must be positive multiples of 32", h, w)
	}
	if !m.HasWeights() {
		return nil, ErrNoWeights
	}
	if x.Backend() == nil || x.Buffer().Len != x.Numel() {
		return nil, fmt.Errorf("model: input of shape %v holds no data", x.Shape)
	}
	if be := m.Backend(); x.Backend() != be {
		return nil, fmt.Errorf("model: input is on the %s backend, the model on %s", x.Backend().Name(), be.Name())
	}
	if m.Fused && mode == Train {
		return nil, errors.New("model: a fused model has no BatchNorm and supports only Eval mode")
	}
	if mode == Train && x.Shape[0]*(x.Shape[2]/32)*(x.Shape[3]/32) < 2 {
		// BatchNorm's batch variance at stride 32 needs two values per channel.
		return nil, fmt.Errorf("model: train mode needs more than one value per channel at stride 32; input %v has one", x.Shape)
	}
	e := &executor{tp: tp, train: mode == Train}
	return m.run(e, x, nil), nil
}

func shapeOrNil(t *tensor.Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape
}
