package optim

import (
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// DeviceKernels is what a backend without host kernels implements to run
// this package's fused kernels on its own memory (the CUDA backend does):
// the steps, clipping and the EMA then never cross to the host. Each
// method is the device twin of one Go kernel here, with the same formulas
// and parameter meanings in float32, and is checked against it; every
// buffer is the backend's own. Scalars derived in double (the AdamW bias
// corrections, the Muon step) are rounded to float32 as the Go code
// rounds them.
type DeviceKernels interface {
	// SGDNesterovSteps is sgdNesterov on every parameter of a list (one
	// group's, sharing lr, momentum, decay and weight; the slices are
	// parallel): g' = g + wd·p; buf = first ? g' : mu·buf + g'; p −=
	// float32(lr·weight)·(g' + mu·buf). A device runs a list as one
	// launch, not one per parameter, whose fixed cost would dominate a
	// small model's step.
	SGDNesterovSteps(params, grads, bufs []backend.Buffer, first []bool, lr, momentum, weightDecay, weight float64)
	// AdamWSteps is AdamW's update at step t (1-based) with decoupled
	// decay on every parameter of a list, moments in m and v.
	AdamWSteps(params, grads, m, v []backend.Buffer, lr, weightDecay, beta1, beta2, eps float64, t int)
	// MuonSteps is MuSGD's muonPart on every rows×cols parameter of a
	// list sharing momentum and step (one group's matrices of one shape;
	// the slices are parallel): m ← lerp(m, g, 1−mu); u = lerp(g, m, mu);
	// then, unless step is 0, O = NS5(u) and p −= step·O; the gradient is
	// left unchanged. A device orthogonalises the list as one batch
	// (strided-batched products), not matrix by matrix, whose thirty-odd
	// launches each would dominate the step.
	MuonSteps(params, grads, m []backend.Buffer, rows, cols int, momentum float64, step float32)
	// ClipGrads scales grads by min(maxNorm/(norm + 1e-6), 1), norm their
	// global L2 norm, the coefficient computed and applied on the device;
	// norm, when present (one element), receives the norm before clipping.
	ClipGrads(grads []backend.Buffer, maxNorm float64, norm backend.Buffer)
	// GradNorm writes the global L2 norm of grads into norm (one element).
	GradNorm(grads []backend.Buffer, norm backend.Buffer)
	// EMAUpdate folds state into avg: avg = avg·d + (1 − d)·state.
	EMAUpdate(avg, state []backend.Buffer, d float32)
	// ZeroGrads clears every buffer of grads.
	ZeroGrads(grads []backend.Buffer)
}

// stepList gathers one list-form step's parallel slices, reused from
// group to group.
type stepList struct {
	params, grads, a, b []backend.Buffer
	first               []bool
}

func (l *stepList) reset() {
	l.params, l.grads, l.a, l.b, l.first = l.params[:0], l.grads[:0], l.a[:0], l.b[:0], l.first[:0]
}

func (l *stepList) add(p *Param, a, b backend.Buffer, first bool) {
	l.params, l.grads = append(l.params, p.Value), append(l.grads, p.Gradient)
	l.a, l.b, l.first = append(l.a, a), append(l.b, b), append(l.first, first)
}

func gradients(params []*Param) []backend.Buffer {
	g := make([]backend.Buffer, len(params))
	for i, p := range params {
		g[i] = p.Gradient
	}
	return g
}

// readScalar allocates a one-element buffer on be, lets f write it and
// downloads it: the norm's single counted crossing.
func readScalar(be backend.Backend, f func(backend.Buffer)) float64 {
	b := be.Alloc(1)
	defer be.Free(b)
	f(b)
	var v [1]float32
	be.Download(v[:], b)
	return float64(v[0])
}

func (o *SGD) stepOn(dk DeviceKernels, first map[*Param]bool) {
	var l stepList
	for _, g := range o.groups {
		l.reset()
		for _, p := range g.Params {
			l.add(p, o.buf[p], backend.Buffer{}, first[p])
		}
		dk.SGDNesterovSteps(l.params, l.grads, l.a, l.first, g.LR, g.Momentum, g.WeightDecay, 1)
	}
}

// stepOn runs each group's Muon parts, one batch per shape and step
// (Newton–Schulz is per matrix; a batch runs them together), and then its
// SGD parts as one list; each parameter's Muon update still precedes its
// SGD update on the device's queue.
func (o *MuSGD) stepOn(dk DeviceKernels) {
	type shape struct {
		rows, cols int
		step       float32
	}
	var l stepList
	var keys []shape
	batches := map[shape]*stepList{}
	for _, g := range o.groups {
		l.reset()
		w := 1.0
		if g.UseMuon {
			w = o.SGDWeight
			keys = keys[:0]
			clear(batches)
		}
		for _, p := range g.Params {
			st := o.state[p]
			if g.UseMuon {
				sh := p.Shape
				s := math.Sqrt(max(1, float64(sh[len(sh)-2])/float64(sh[len(sh)-1])))
				rows, cols := muonMatrix(sh)
				k := shape{rows, cols, float32(g.LR * o.MuonWeight * s)}
				b := batches[k]
				if b == nil {
					b = &stepList{}
					batches[k] = b
					keys = append(keys, k)
				}
				b.add(p, st.muon, backend.Buffer{}, false)
			}
			l.add(p, st.sgd, backend.Buffer{}, st.first)
			st.first = false
		}
		if g.UseMuon {
			for _, k := range keys {
				b := batches[k]
				dk.MuonSteps(b.params, b.grads, b.a, k.rows, k.cols, g.Momentum, k.step)
			}
		}
		dk.SGDNesterovSteps(l.params, l.grads, l.a, l.first, g.LR, g.Momentum, g.WeightDecay, w)
	}
}

// stepOn advances each parameter's step count and runs every run of
// parameters sharing a count (a whole group, unless parameters joined
// late) as one list.
func (o *AdamW) stepOn(dk DeviceKernels) {
	var l stepList
	for _, g := range o.groups {
		l.reset()
		t := 0
		for _, p := range g.Params {
			st := o.state[p]
			st.t++
			if len(l.params) > 0 && st.t != t {
				dk.AdamWSteps(l.params, l.grads, l.a, l.b, g.LR, g.WeightDecay, o.Beta1, o.Beta2, o.Eps, t)
				l.reset()
			}
			t = st.t
			l.add(p, st.m, st.v, false)
		}
		if len(l.params) > 0 {
			dk.AdamWSteps(l.params, l.grads, l.a, l.b, g.LR, g.WeightDecay, o.Beta1, o.Beta2, o.Eps, t)
		}
	}
}
