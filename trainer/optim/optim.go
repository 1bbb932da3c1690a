package optim

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Every Step below is one fused kernel over all parameters (see launch):
// the Go loops are the CPU implementation that runs on cpu and emu memory
// in place, and the reference a device twin is checked against. The
// optimisers' own buffers (momentum, Adam moments, Newton–Schulz scratch)
// are allocated on the parameters' backend; State and LoadState are the
// only crossings.

// sgdNesterov applies one SGD step with L2 weight decay and Nesterov
// momentum to data, scaled by w (MuSGD's sgd weight; 1 for plain SGD). The
// buffer starts as the first decayed gradient, as PyTorch's SGD does.
func sgdNesterov(data, grad, buf []float32, first bool, lr, mu, wd, w float64) {
	step := float32(lr * w)
	m, d := float32(mu), float32(wd)
	for i, g := range grad {
		if d != 0 {
			g += d * data[i]
		}
		if first {
			buf[i] = g
		} else {
			buf[i] = m*buf[i] + g
		}
		data[i] -= step * (g + m*buf[i])
	}
}

// SGD is stochastic gradient descent with Nesterov momentum and L2 weight
// decay, the reference's optimizer=SGD.
type SGD struct {
	groups []*Group
	be     backend.Backend
	k      Kernels
	buf    map[*Param]backend.Buffer
}

// NewSGD returns an SGD over groups, on their parameters' backend.
func NewSGD(groups []*Group) *SGD {
	be, k := groupsBackend(groups)
	return &SGD{groups: groups, be: be, k: k, buf: map[*Param]backend.Buffer{}}
}

// Groups implements Optimizer.
func (o *SGD) Groups() []*Group { return o.groups }

// Step implements Optimizer.
func (o *SGD) Step() {
	if o.be == nil {
		return
	}
	first := map[*Param]bool{}
	for _, g := range o.groups {
		for _, p := range g.Params {
			if _, ok := o.buf[p]; !ok {
				// The first step writes the whole buffer.
				o.buf[p], first[p] = o.be.Alloc(p.Value.Len), true
			}
		}
	}
	if dk := o.k.Device; dk != nil {
		o.stepOn(dk, first)
		return
	}
	o.k.Host.RunHost(func(v backend.View) {
		for _, g := range o.groups {
			for _, p := range g.Params {
				sgdNesterov(v.Float32(p.Value), v.Float32(p.Gradient), v.Float32(o.buf[p]), first[p], g.LR, g.Momentum, g.WeightDecay, 1)
			}
		}
	})
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
	be                    backend.Backend
	k                     Kernels
	state                 map[*Param]*musgdState
	// scratch on the backend: the Muon input and output (u, o) and the
	// Newton–Schulz matrices (x, t as large as a parameter, a, b square in
	// its smaller side), each sized for the largest Muon parameter.
	u, o, x, t, a, b backend.Buffer
	ns               newtonSchulz
}

type musgdState struct {
	muon, sgd backend.Buffer
	first     bool
}

// NewMuSGD returns a MuSGD over groups with the given part weights
// (0.5/0.5 above 10,000 iterations, 0.1/1.0 otherwise: see Auto), on
// their parameters' backend.
func NewMuSGD(groups []*Group, muonWeight, sgdWeight float64) *MuSGD {
	be, k := groupsBackend(groups)
	return &MuSGD{groups: groups, MuonWeight: muonWeight, SGDWeight: sgdWeight, be: be, k: k, state: map[*Param]*musgdState{}}
}

// Groups implements Optimizer.
func (o *MuSGD) Groups() []*Group { return o.groups }

// prepare allocates the buffers of parameters seen for the first time and
// grows the scratch to the largest Muon parameter.
func (o *MuSGD) prepare() {
	var n, sq int
	for _, g := range o.groups {
		for _, p := range g.Params {
			if _, ok := o.state[p]; !ok {
				st := &musgdState{sgd: o.be.Alloc(p.Value.Len), first: true}
				if g.UseMuon {
					st.muon = zeroed(o.be, p.Value.Len)
				}
				o.state[p] = st
			}
			if g.UseMuon {
				r, c := muonMatrix(p.Shape)
				n, sq = max(n, r*c), max(sq, min(r, c)*min(r, c))
			}
		}
	}
	grow := func(b *backend.Buffer, n int) {
		if b.Len < n {
			if b.Present() {
				o.be.Free(*b)
			}
			*b = o.be.Alloc(n)
		}
	}
	if o.k.Device != nil {
		return // the device twin keeps its own Muon and Newton–Schulz workspace
	}
	grow(&o.u, n)
	grow(&o.o, n)
	grow(&o.x, n)
	grow(&o.t, n)
	grow(&o.a, sq)
	grow(&o.b, sq)
}

// Step implements Optimizer.
func (o *MuSGD) Step() {
	if o.be == nil {
		return
	}
	o.prepare()
	if dk := o.k.Device; dk != nil {
		o.stepOn(dk)
		return
	}
	o.k.Host.RunHost(func(v backend.View) {
		o.ns = newtonSchulz{x: v.Float32(o.x), a: v.Float32(o.a), b: v.Float32(o.b), t: v.Float32(o.t)}
		u, out := v.Float32(o.u), v.Float32(o.o)
		for _, g := range o.groups {
			for _, p := range g.Params {
				st := o.state[p]
				data, grad := v.Float32(p.Value), v.Float32(p.Gradient)
				if g.UseMuon {
					o.muonPart(p.Shape, data, grad, v.Float32(st.muon), u, out, g.LR, g.Momentum)
					sgdNesterov(data, grad, v.Float32(st.sgd), st.first, g.LR, g.Momentum, g.WeightDecay, o.SGDWeight)
				} else {
					sgdNesterov(data, grad, v.Float32(st.sgd), st.first, g.LR, g.Momentum, g.WeightDecay, 1)
				}
				st.first = false
			}
		}
		o.ns = newtonSchulz{} // the views must not outlive the kernel
	})
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
// so the SGD part that follows sees g. u and out are scratch of at least
// len(data) elements.
func (o *MuSGD) muonPart(shape []int, data, grad, m, u, out []float32, lr, mu float64) {
	n := len(data)
	u, out = u[:n], out[:n]
	w := float32(1 - mu)
	muf := float32(mu)
	for i, g := range grad {
		m[i] += w * (g - m[i])
		u[i] = g + muf*(m[i]-g)
	}
	s := math.Sqrt(max(1, float64(shape[len(shape)-2])/float64(shape[len(shape)-1])))
	step := float32(lr * o.MuonWeight * s)
	if step == 0 {
		// The first warmup iteration has lr 0: only the buffer moves, and
		// the orthogonalisation (the step's dominant cost) can be skipped.
		return
	}
	rows, cols := muonMatrix(shape)
	o.ns.orthogonalise(out, u, rows, cols)
	for i, v := range out {
		data[i] -= step * v
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
	be           backend.Backend
	k            Kernels
	state        map[*Param]*adamState
}

type adamState struct {
	m, v backend.Buffer
	t    int
}

// NewAdamW returns an AdamW over groups with betas (beta1, 0.999), eps
// 1e-8, on their parameters' backend.
func NewAdamW(groups []*Group, beta1 float64) *AdamW {
	be, k := groupsBackend(groups)
	return &AdamW{groups: groups, Beta1: beta1, Beta2: 0.999, Eps: 1e-8, be: be, k: k, state: map[*Param]*adamState{}}
}

// Groups implements Optimizer.
func (o *AdamW) Groups() []*Group { return o.groups }

// Step implements Optimizer.
func (o *AdamW) Step() {
	if o.be == nil {
		return
	}
	for _, g := range o.groups {
		for _, p := range g.Params {
			if _, ok := o.state[p]; !ok {
				o.state[p] = &adamState{m: zeroed(o.be, p.Value.Len), v: zeroed(o.be, p.Value.Len)}
			}
		}
	}
	if dk := o.k.Device; dk != nil {
		o.stepOn(dk)
		return
	}
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	o.k.Host.RunHost(func(v backend.View) {
		for _, g := range o.groups {
			for _, p := range g.Params {
				st := o.state[p]
				st.t++
				bc1 := 1 - math.Pow(o.Beta1, float64(st.t))
				bc2 := math.Sqrt(1 - math.Pow(o.Beta2, float64(st.t)))
				decay := float32(1 - g.LR*g.WeightDecay)
				stepSize := float32(g.LR / bc1)
				inv := float32(1 / bc2)
				eps := float32(o.Eps)
				data, m, vv := v.Float32(p.Value), v.Float32(st.m), v.Float32(st.v)
				for i, gr := range v.Float32(p.Gradient) {
					data[i] *= decay
					m[i] = b1*m[i] + (1-b1)*gr
					vv[i] = b2*vv[i] + (1-b2)*gr*gr
					den := float32(math.Sqrt(float64(vv[i])))*inv + eps
					data[i] -= stepSize * m[i] / den
				}
			}
		}
	})
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
