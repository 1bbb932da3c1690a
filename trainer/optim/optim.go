package optim

import (
	"fmt"
	"math"
)

// sgdNesterov applies one SGD step with L2 weight decay and Nesterov
// momentum to p, scaled by w (MuSGD's sgd weight; 1 for plain SGD). The
// buffer starts as the first decayed gradient, as PyTorch's SGD does.
func sgdNesterov(p *Param, buf []float32, first bool, lr, mu, wd, w float64) {
	step := float32(lr * w)
	m, d := float32(mu), float32(wd)
	for i, g := range p.Grad {
		if d != 0 {
			g += d * p.Data[i]
		}
		if first {
			buf[i] = g
		} else {
			buf[i] = m*buf[i] + g
		}
		p.Data[i] -= step * (g + m*buf[i])
	}
}

// SGD is stochastic gradient descent with Nesterov momentum and L2 weight
// decay, the reference's optimizer=SGD.
type SGD struct {
	groups []*Group
	buf    map[*Param][]float32
}

// NewSGD returns an SGD over groups.
func NewSGD(groups []*Group) *SGD {
	return &SGD{groups: groups, buf: map[*Param][]float32{}}
}

// Groups implements Optimizer.
func (o *SGD) Groups() []*Group { return o.groups }

// Step implements Optimizer.
func (o *SGD) Step() {
	for _, g := range o.groups {
		for _, p := range g.Params {
			b, ok := o.buf[p]
			if !ok {
				b = make([]float32, len(p.Data))
				o.buf[p] = b
			}
			sgdNesterov(p, b, !ok, g.LR, g.Momentum, g.WeightDecay, 1)
		}
	}
}

// MuSGD is the reference's hybrid optimiser: Muon groups take a Muon
// update (momentum, Nesterov, Newton–Schulz orthogonalisation) scaled by
// MuonWeight followed by an SGD update scaled by SGDWeight; the other
// groups take plain SGD with Nesterov momentum. Newton–Schulz runs in
// float32; the reference runs it in bfloat16, which a float32 iteration
// matches only statistically (see the package doc).
type MuSGD struct {
	groups                []*Group
	MuonWeight, SGDWeight float64
	state                 map[*Param]*musgdState
	ns                    newtonSchulz
	u, o                  []float32
}

type musgdState struct {
	muon, sgd []float32
	first     bool
}

// NewMuSGD returns a MuSGD over groups with the given part weights
// (0.5/0.5 above 10,000 iterations, 0.1/1.0 otherwise: see Auto).
func NewMuSGD(groups []*Group, muonWeight, sgdWeight float64) *MuSGD {
	return &MuSGD{groups: groups, MuonWeight: muonWeight, SGDWeight: sgdWeight, state: map[*Param]*musgdState{}}
}

// Groups implements Optimizer.
func (o *MuSGD) Groups() []*Group { return o.groups }

// Step implements Optimizer.
func (o *MuSGD) Step() {
	for _, g := range o.groups {
		for _, p := range g.Params {
			st, ok := o.state[p]
			if !ok {
				st = &musgdState{sgd: make([]float32, len(p.Data)), first: true}
				if g.UseMuon {
					st.muon = make([]float32, len(p.Data))
				}
				o.state[p] = st
			}
			if g.UseMuon {
				o.muonPart(p, st.muon, g.LR, g.Momentum)
				sgdNesterov(p, st.sgd, st.first, g.LR, g.Momentum, g.WeightDecay, o.SGDWeight)
			} else {
				sgdNesterov(p, st.sgd, st.first, g.LR, g.Momentum, g.WeightDecay, 1)
			}
			st.first = false
		}
	}
}

// muonMatrix is the 2-D view Newton–Schulz orthogonalises: (dim0, rest).
func muonMatrix(shape []int) (rows, cols int) {
	rows, cols = shape[0], 1
	for _, d := range shape[1:] {
		cols *= d
	}
	return rows, cols
}

// muonPart applies the upstream muon_update: m ← lerp(m, g, 1−μ); u =
// lerp(g, m, μ) (Nesterov); O = NS5(u as dim0 × rest); p ← p − lr·muonWeight
// ·√max(1, size(−2)/size(−1))·O. The gradient itself is left unchanged,
// so the SGD part that follows sees g.
func (o *MuSGD) muonPart(p *Param, m []float32, lr, mu float64) {
	n := len(p.Data)
	o.u, o.o = grow(o.u, n), grow(o.o, n)
	w := float32(1 - mu)
	muf := float32(mu)
	for i, g := range p.Grad {
		m[i] += w * (g - m[i])
		o.u[i] = g + muf*(m[i]-g)
	}
	s := math.Sqrt(max(1, float64(p.Shape[len(p.Shape)-2])/float64(p.Shape[len(p.Shape)-1])))
	step := float32(lr * o.MuonWeight * s)
	if step == 0 {
		// The first warmup iteration has lr 0: only the buffer moves, and
		// the orthogonalisation (the step's dominant cost) can be skipped.
		return
	}
	rows, cols := muonMatrix(p.Shape)
	o.ns.orthogonalise(o.o, o.u, rows, cols)
	for i, v := range o.o {
		p.Data[i] -= step * v
	}
}

// AdamW is Adam with decoupled weight decay (PyTorch's AdamW), the
// reference's optimizer=AdamW with betas (momentum, 0.999). Group
// Momentum is not read: beta1 stays as constructed, as in the reference
// where warmup ramps only SGD-style momentum.
type AdamW struct {
	groups       []*Group
	Beta1, Beta2 float64
	Eps          float64
	state        map[*Param]*adamState
}

type adamState struct {
	m, v []float32
	t    int
}

// NewAdamW returns an AdamW over groups with betas (beta1, 0.999), eps 1e-8.
func NewAdamW(groups []*Group, beta1 float64) *AdamW {
	return &AdamW{groups: groups, Beta1: beta1, Beta2: 0.999, Eps: 1e-8, state: map[*Param]*adamState{}}
}

// Groups implements Optimizer.
func (o *AdamW) Groups() []*Group { return o.groups }

// Step implements Optimizer.
func (o *AdamW) Step() {
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	for _, g := range o.groups {
		for _, p := range g.Params {
			st, ok := o.state[p]
			if !ok {
				st = &adamState{m: make([]float32, len(p.Data)), v: make([]float32, len(p.Data))}
				o.state[p] = st
			}
			st.t++
			bc1 := 1 - math.Pow(o.Beta1, float64(st.t))
			bc2 := math.Sqrt(1 - math.Pow(o.Beta2, float64(st.t)))
			decay := float32(1 - g.LR*g.WeightDecay)
			stepSize := float32(g.LR / bc1)
			inv := float32(1 / bc2)
			eps := float32(o.Eps)
			for i, gr := range p.Grad {
				p.Data[i] *= decay
				st.m[i] = b1*st.m[i] + (1-b1)*gr
				st.v[i] = b2*st.v[i] + (1-b2)*gr*gr
				den := float32(math.Sqrt(float64(st.v[i])))*inv + eps
				p.Data[i] -= stepSize * st.m[i] / den
			}
		}
	}
}

// AutoSettings is what the reference's optimizer=auto chooses.
type AutoSettings struct {
	// LR is lr0: 0.01 above 10,000 iterations, else round(0.002·5/(4+nc), 6).
	LR float64
	// Momentum is auto's 0.9 (warmup overwrites it from the first iteration).
	Momentum float64
	// MuonWeight and SGDWeight are MuSGD's part weights (8.4.2 mapping).
	MuonWeight, SGDWeight float64
	// WarmupBiasLR is forced to 0 under auto.
	WarmupBiasLR float64
	// Iterations is ceil(trainImages / max(batch, nbs)) · epochs.
	Iterations int
}

// Auto returns the optimizer=auto choice (always MuSGD in 8.4.2).
func Auto(trainImages, batch, nbs, epochs, nc int) (AutoSettings, error) {
	if trainImages < 1 || batch < 1 || nbs < 1 || epochs < 1 || nc < 1 {
		return AutoSettings{}, fmt.Errorf("optim: auto needs positive images %d, batch %d, nbs %d, epochs %d, nc %d", trainImages, batch, nbs, epochs, nc)
	}
	d := max(batch, nbs)
	it := (trainImages + d - 1) / d * epochs
	s := AutoSettings{Momentum: 0.9, Iterations: it}
	if it > 10000 {
		s.LR, s.MuonWeight, s.SGDWeight = 0.01, 0.5, 0.5
	} else {
		s.LR = math.Round(0.002*5/(4+float64(nc))*1e6) / 1e6
		s.MuonWeight, s.SGDWeight = 0.1, 1.0
	}
	return s, nil
}

// ScaledWeightDecay is the decay the reference passes to the optimiser:
// weightDecay · batch · accumulate / nbs with accumulate = max(round(nbs/batch), 1).
func ScaledWeightDecay(weightDecay float64, batch, nbs int) float64 {
	acc := max(math.RoundToEven(float64(nbs)/float64(batch)), 1)
	return weightDecay * float64(batch) * acc / float64(nbs)
}
