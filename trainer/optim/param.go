package optim

import (
	"fmt"
	"math"
	"strings"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Param is one trainable tensor: its value and gradient buffers on a
// backend, which the optimiser updates and clips in place (allocate the
// gradient before building the Param). A Param given instead as host
// slices Data and Grad (a test, a reference computation) runs over those
// slices without a copy on Host, a backend whose memory is the host's that
// the caller picks (the CPU backend): its Backend, Kernels, Value and
// Gradient are filled in on first use.
type Param struct {
	// Name is the state-dict key; it decides the 3×-lr subgroup.
	Name string
	// Shape decides the Muon group (ndim ≥ 2) and the Newton–Schulz matrix.
	Shape []int
	// Backend owns Value and Gradient (the model tensors' buffers).
	Backend backend.Backend
	// Kernels are where the fused kernels run on Backend's memory, as the
	// device chose them when it opened (trainer/device's Optim); every
	// parameter of an optimiser shares them.
	Kernels         Kernels
	Value, Gradient backend.Buffer
	// Data and Grad are the host form (see above).
	Data, Grad []float32
	// Host is the backend the host form's slices are wrapped on.
	Host backend.HostMemory
	// Norm marks the weight of a normalisation layer (BatchNorm): it is
	// never decayed.
	Norm bool
}

// bind gives a host-form Param its buffers on Host.
func (p *Param) bind() error {
	if p.Backend != nil {
		return nil
	}
	if p.Host == nil {
		return fmt.Errorf("optim: parameter %q has neither a backend nor host slices on a host backend (Param.Host)", p.Name)
	}
	p.Backend, p.Value, p.Gradient = p.Host, p.Host.Wrap(p.Data), p.Host.Wrap(p.Grad)
	p.Kernels = HostKernels(p.Host)
	return nil
}

// backendOf binds params and returns the one backend they share and its
// kernels (nil for none); parameters on different backends, or without
// kernels, are an error.
func backendOf(params []*Param) (backend.Backend, Kernels, error) {
	var be backend.Backend
	var k Kernels
	for _, p := range params {
		if err := p.bind(); err != nil {
			return nil, Kernels{}, err
		}
		if !p.Kernels.set() {
			return nil, Kernels{}, fmt.Errorf("optim: parameter %q has no kernels (Param.Kernels: the device's Optim)", p.Name)
		}
		if be == nil {
			be, k = p.Backend, p.Kernels
		} else if p.Backend != be {
			return nil, Kernels{}, fmt.Errorf("optim: parameter %q is on the %s backend, others on %s", p.Name, p.Backend.Name(), be.Name())
		}
	}
	return be, k, nil
}

// groupsBackend is mustBackend over every group's parameters: an
// optimiser runs on one backend.
func groupsBackend(groups []*Group) (backend.Backend, Kernels) {
	var all []*Param
	for _, g := range groups {
		all = append(all, g.Params...)
	}
	return mustBackend(all)
}

// Kind is a parameter group's role.
type Kind int

// Group kinds in the reference's order.
const (
	KindWeight Kind = iota // ndim < 2, not bias, not norm: decayed (empty in YOLO26)
	KindNorm               // normalisation weights: no decay
	KindBias               // every name containing "bias": no decay
	KindMuon               // ndim ≥ 2: decayed; orthogonalised by MuSGD
)

func (k Kind) String() string {
	return [...]string{"weight", "bn", "bias", "muon"}[k]
}

// Group is a set of parameters sharing hyperparameters. LR and Momentum
// are what the next Step uses; the schedule rewrites them every iteration.
type Group struct {
	Kind Kind
	// Fast marks the 3×-lr subgroup (class towers, proto.cv3, semseg).
	Fast   bool
	Params []*Param
	// InitialLR is the schedule's base: lr0, times 3 for Fast groups.
	InitialLR   float64
	LR          float64
	Momentum    float64
	WeightDecay float64
	// UseMuon is true for KindMuon groups under MuSGD.
	UseMuon bool
}

// GroupConfig sets the base hyperparameters of BuildGroups.
type GroupConfig struct {
	LR, Momentum, WeightDecay float64
	// Muon sends ndim ≥ 2 tensors to the Muon groups (MuSGD); otherwise
	// they join the decayed weight groups (SGD, AdamW).
	Muon bool
	// FastLRScale multiplies the lr of the fast subgroups; 0 means 3.
	FastLRScale float64
}

// IsFast reports whether a parameter name belongs to the 3×-lr subgroup:
// the reference's regex (?=.*23)(?=.*cv3)|proto\.semseg|flow_model.
func IsFast(name string) bool {
	return strings.Contains(name, "23") && strings.Contains(name, "cv3") ||
		strings.Contains(name, "proto.semseg") || strings.Contains(name, "flow_model")
}

// KindOf classifies p by the reference's first-match rules.
func KindOf(p *Param, muon bool) Kind {
	switch {
	case len(p.Shape) >= 2:
		if muon {
			return KindMuon
		}
		return KindWeight
	case strings.Contains(p.Name, "bias"):
		return KindBias
	case p.Norm || strings.Contains(p.Name, "logit_scale"):
		return KindNorm
	}
	return KindWeight
}

// BuildGroups splits params into the reference's eight groups, in its
// order: [weight×3, weight, bn×3, bn, bias×3, bias, muon×3, muon]. Empty
// groups are kept so that indices match the reference's.
func BuildGroups(params []*Param, cfg GroupConfig) ([]*Group, error) {
	scale := cfg.FastLRScale
	if scale == 0 {
		scale = 3
	}
	groups := make([]*Group, 8)
	for i := range groups {
		k := Kind(i / 2)
		g := &Group{Kind: k, Fast: i%2 == 0, Momentum: cfg.Momentum, InitialLR: cfg.LR}
		if g.Fast {
			g.InitialLR = cfg.LR * scale
		}
		g.LR = g.InitialLR
		if k == KindWeight || k == KindMuon {
			g.WeightDecay = cfg.WeightDecay
		}
		g.UseMuon = k == KindMuon
		groups[i] = g
	}
	if _, _, err := backendOf(params); err != nil {
		return nil, err
	}
	seen := make(map[*Param]bool, len(params))
	for _, p := range params {
		if seen[p] {
			return nil, fmt.Errorf("optim: parameter %q listed twice", p.Name)
		}
		seen[p] = true
		n := 1
		for _, d := range p.Shape {
			n *= d
		}
		if n != p.Value.Len || p.Gradient.Len != n {
			return nil, fmt.Errorf("optim: parameter %q: shape %v, %d values, %d gradients", p.Name, p.Shape, p.Value.Len, p.Gradient.Len)
		}
		i := 2 * int(KindOf(p, cfg.Muon))
		if !IsFast(p.Name) {
			i++
		}
		groups[i].Params = append(groups[i].Params, p)
	}
	return groups, nil
}

// GlobalNorm is the L2 norm of all gradients together, computed in one
// kernel on their backend.
func GlobalNorm(params []*Param) float64 {
	be, k := mustBackend(params)
	if be == nil {
		return 0
	}
	if dk := k.Device; dk != nil {
		return readScalar(be, func(norm backend.Buffer) { dk.GradNorm(gradients(params), norm) })
	}
	var n float64
	k.Host.RunHost(func(v backend.View) { n = globalNorm(v, params) })
	return n
}

func globalNorm(v backend.View, params []*Param) float64 {
	s := 0.0
	for _, p := range params {
		for _, g := range v.Float32(p.Gradient) {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}

// ClipCoef is the reference's clip_grad_norm_ coefficient,
// min(maxNorm/(norm+1e-6), 1).
func ClipCoef(norm, maxNorm float64) float64 {
	return min(maxNorm/(norm+1e-6), 1)
}

// ScaleGrads multiplies every gradient by c (in float32, as the
// reference), in one kernel on their backend.
func ScaleGrads(params []*Param, c float64) {
	be, k := mustBackend(params)
	if c == 1 || be == nil {
		return
	}
	if k.Device != nil {
		for _, p := range params {
			be.Axpby(float32(c), p.Gradient, 0, p.Gradient) // y = c·x: scaleGrads's g *= c
		}
		return
	}
	k.Host.RunHost(func(v backend.View) { scaleGrads(v, params, c) })
}

func scaleGrads(v backend.View, params []*Param, c float64) {
	if c == 1 {
		return
	}
	f := float32(c)
	for _, p := range params {
		g := v.Float32(p.Gradient)
		for i := range g {
			g[i] *= f
		}
	}
}

// ClipGradNorm scales all gradients so that their global L2 norm is at
// most maxNorm (10 in the reference) and returns the norm before clipping.
// The norm and the coefficient are computed and applied in one kernel on
// the gradients' backend; ClipGrads is the same kernel for a caller that
// does not read the norm, so that a device never has to send it back.
func ClipGradNorm(params []*Param, maxNorm float64) float64 {
	be, k := mustBackend(params)
	if be == nil {
		return 0
	}
	if dk := k.Device; dk != nil {
		return readScalar(be, func(norm backend.Buffer) { dk.ClipGrads(gradients(params), maxNorm, norm) })
	}
	var n float64
	k.Host.RunHost(func(v backend.View) {
		n = globalNorm(v, params)
		scaleGrads(v, params, ClipCoef(n, maxNorm))
	})
	return n
}

// ClipGrads is ClipGradNorm without reading the norm back.
func ClipGrads(params []*Param, maxNorm float64) {
	if be, k := mustBackend(params); be != nil {
		if dk := k.Device; dk != nil {
			dk.ClipGrads(gradients(params), maxNorm, backend.Buffer{})
			return
		}
	}
	ClipGradNorm(params, maxNorm)
}

// ZeroGrad clears every gradient in place, on its backend.
func ZeroGrad(params []*Param) {
	if be, k, err := backendOf(params); err == nil && be != nil {
		if dk := k.Device; dk != nil {
			dk.ZeroGrads(gradients(params))
			return
		}
	}
	for _, p := range params {
		if err := p.bind(); err != nil {
			panic(err) // as mustBackend: parameters come from one model
		}
		p.Backend.Fill(p.Gradient, 0)
	}
}

// mustBackend is backendOf for the package's free functions, whose
// parameters come from one model: a mix of backends is a programming error.
func mustBackend(params []*Param) (backend.Backend, Kernels) {
	be, k, err := backendOf(params)
	if err != nil {
		panic(err)
	}
	return be, k
}

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Groups exposes the parameter groups; the schedule sets their LR and
	// Momentum before each Step.
	Groups() []*Group
	// Step applies one update from the current gradients.
	Step()
	// State returns copies of the per-parameter buffers, keyed
	// "<param>.<buffer>", for checkpoints; LoadState restores them.
	State() map[string][]float32
	LoadState(map[string][]float32) error
}
