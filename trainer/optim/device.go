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
	// SGDNesterovStep is sgdNesterov: g' = g + wd·p; buf = first ? g' :
	// mu·buf + g'; p −= float32(lr·weight)·(g' + mu·buf).
	SGDNesterovStep(param, grad, buf backend.Buffer, first bool, lr, momentum, weightDecay, weight float64)
	// AdamWStep is AdamW's update at step t (1-based) with decoupled decay.
	AdamWStep(param, grad, m, v backend.Buffer, lr, weightDecay, beta1, beta2, eps float64, t int)
	// MuonStep is MuSGD's muonPart on one rows×cols parameter: m ←
	// lerp(m, g, 1−mu); u = lerp(g, m, mu); then, unless step is 0, O =
	// NS5(u) and p −= step·O. u and out are scratch of at least
	// rows·cols elements; the gradient is left unchanged.
	MuonStep(param, grad, m, u, out backend.Buffer, rows, cols int, momentum float64, step float32)
	// ClipGrads scales grads by min(maxNorm/(norm + 1e-6), 1), norm their
	// global L2 norm, the coefficient computed and applied on the device;
	// norm, when present (one element), receives the norm before clipping.
	ClipGrads(grads []backend.Buffer, maxNorm float64, norm backend.Buffer)
	// GradNorm writes the global L2 norm of grads into norm (one element).
	GradNorm(grads []backend.Buffer, norm backend.Buffer)
	// EMAUpdate folds state into avg: avg = avg·d + (1 − d)·state.
	EMAUpdate(avg, state []backend.Buffer, d float32)
}

// twin returns be's device twins. A backend with host kernels runs the
// Go code itself (bit for bit the reference), so that takes precedence.
func twin(be backend.Backend) (DeviceKernels, bool) {
	if _, host := be.(backend.HostKernels); host {
		return nil, false
	}
	dk, ok := be.(DeviceKernels)
	return dk, ok
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
	for _, g := range o.groups {
		for _, p := range g.Params {
			dk.SGDNesterovStep(p.Value, p.Gradient, o.buf[p], first[p], g.LR, g.Momentum, g.WeightDecay, 1)
		}
	}
}

func (o *MuSGD) stepOn(dk DeviceKernels) {
	for _, g := range o.groups {
		for _, p := range g.Params {
			st := o.state[p]
			w := 1.0
			if g.UseMuon {
				shape := p.Shape
				s := math.Sqrt(max(1, float64(shape[len(shape)-2])/float64(shape[len(shape)-1])))
				rows, cols := muonMatrix(shape)
				dk.MuonStep(p.Value, p.Gradient, st.muon, o.u, o.o, rows, cols, g.Momentum, float32(g.LR*o.MuonWeight*s))
				w = o.SGDWeight
			}
			dk.SGDNesterovStep(p.Value, p.Gradient, st.sgd, st.first, g.LR, g.Momentum, g.WeightDecay, w)
			st.first = false
		}
	}
}

func (o *AdamW) stepOn(dk DeviceKernels) {
	for _, g := range o.groups {
		for _, p := range g.Params {
			st := o.state[p]
			st.t++
			dk.AdamWStep(p.Value, p.Gradient, st.m, st.v, g.LR, g.WeightDecay, o.Beta1, o.Beta2, o.Eps, st.t)
		}
	}
}
