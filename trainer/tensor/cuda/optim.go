package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The optimiser kernels of trainer/optim on the device (its
// DeviceKernels, satisfied structurally: neither package imports the
// other). Each method queues the existing kernels on the compute stream
// and returns; nothing crosses to the host, and the gradient-norm
// coefficient is computed and applied on the device.

// engineMatmul runs Newton–Schulz's products on the Backend's engine
// (cuBLAS on a GPU, the naive GEMM on the CPU harness).
type engineMatmul struct{ e engine }

func (m engineMatmul) Gemm(g Gemm, a, b, c Ptr) error { return m.e.gemm(g, a, b, c) }

// scratch returns at least bytes of the Backend's device workspace (the
// reduction partials, Newton–Schulz's matrices), grown as needed. The
// caller holds wsMu until its last launch using it is queued: launches on
// the one stream run in order, so the next user cannot overtake them.
func (be *Backend) scratch(bytes int) Ptr {
	if be.wsBytes < bytes {
		if be.ws != 0 {
			orPanic("free workspace", be.e.free(be.ws))
			be.ws, be.wsBytes = 0, 0
		}
		p, err := be.e.alloc(bytes)
		orPanic(fmt.Sprintf("alloc workspace of %d bytes", bytes), err)
		be.ws, be.wsBytes = p, bytes
	}
	return be.ws
}

func checkLen(op string, n int, bufs ...backend.Buffer) {
	for _, b := range bufs {
		if b.Len < n {
			panic(fmt.Sprintf("cuda backend: %s over %d elements given a buffer of %d", op, n, b.Len))
		}
	}
}

// SGDNesterovStep is trainer/optim's Nesterov SGD step (the sgd_nesterov
// kernel) on param, grad and its momentum buffer.
func (be *Backend) SGDNesterovStep(param, grad, buf backend.Buffer, first bool, lr, momentum, weightDecay, weight float64) {
	checkLen("sgd step", param.Len, grad, buf)
	orPanic("sgd step", be.k.SGDNesterov(be.ptr(param), be.ptr(grad), be.ptr(buf), param.Len, lr, weight, momentum, weightDecay, first))
}

// AdamWStep is trainer/optim's AdamW step t (the adamw_step kernel).
func (be *Backend) AdamWStep(param, grad, m, v backend.Buffer, lr, weightDecay, beta1, beta2, eps float64, t int) {
	checkLen("adamw step", param.Len, grad, m, v)
	orPanic("adamw step", be.k.AdamW(be.ptr(param), be.ptr(grad), be.ptr(m), be.ptr(v), param.Len, lr, weightDecay, beta1, beta2, eps, t))
}

// MuonStep is MuSGD's Muon part: the momentum and Nesterov blend into u,
// then (step ≠ 0) Newton–Schulz of u as rows×cols into out, its products
// on cuBLAS, and param −= step·out.
func (be *Backend) MuonStep(param, grad, m, u, out backend.Buffer, rows, cols int, momentum float64, step float32) {
	n := rows * cols
	checkLen("muon step", n, param, grad, m, u, out)
	orPanic("muon momentum", be.k.MuonMomentum(be.ptr(grad), be.ptr(m), be.ptr(u), n, momentum))
	if step == 0 {
		return // trainer/optim skips the orthogonalisation of a zero step
	}
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	ws := be.scratch(be.k.NewtonSchulzBytes(rows, cols))
	orPanic("newton-schulz", be.k.NewtonSchulz(engineMatmul{be.e}, be.ptr(out), be.ptr(u), rows, cols, ws))
	orPanic("muon update", be.k.Axpby(be.ptr(out), be.ptr(param), 1, -step, n))
}

// globalNorm queues the L2 norm of grads into y; the caller holds wsMu.
// It returns the workspace past the reduction partials.
func (be *Backend) globalNorm(grads []backend.Buffer, y Ptr, extra int) (Ptr, Ptr) {
	xs, ns := make([]Ptr, len(grads)), make([]int, len(grads))
	m := 0
	for i, g := range grads {
		xs[i], ns[i] = be.ptr(g), g.Len
		if g.Len > 0 {
			m += be.k.ReduceScratch(g.Len)
		}
	}
	ws := be.scratch(8*m + extra)
	rest := ws.Add(8 * m)
	if y == 0 {
		y = rest
	}
	orPanic("global norm", be.k.GlobalNorm(xs, ns, ws, y))
	return y, rest
}

// GradNorm writes the global L2 norm of grads into norm[0] (sums in
// double, one fixed order).
func (be *Backend) GradNorm(grads []backend.Buffer, norm backend.Buffer) {
	checkLen("gradient norm", 1, norm)
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	be.globalNorm(grads, be.ptr(norm), 0)
}

// ClipGrads is clip_grad_norm_ on the device: the global norm, the
// coefficient min(maxNorm/(norm + 1e-6), 1) in a one-thread kernel, and
// every gradient scaled by it (scale_by skips a coefficient of 1). A
// present norm buffer receives the norm before clipping.
func (be *Backend) ClipGrads(grads []backend.Buffer, maxNorm float64, norm backend.Buffer) {
	var y Ptr
	if norm.Present() {
		checkLen("clip", 1, norm)
		y = be.ptr(norm)
	}
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	y, rest := be.globalNorm(grads, y, 8)
	coef := rest.Add(4)
	orPanic("clip", be.k.Gather([]int{1}, []int{1}, y, coef))
	orPanic("clip", be.k.ClipCoef(coef, float32(maxNorm)))
	for _, g := range grads {
		orPanic("clip", be.k.ScaleBy(be.ptr(g), coef, g.Len))
	}
}

// EMAUpdate folds state into avg (ema_update): avg = avg·d + (1 − d)·state.
func (be *Backend) EMAUpdate(avg, state []backend.Buffer, d float32) {
	if len(avg) != len(state) {
		panic(fmt.Sprintf("cuda backend: ema of %d buffers updated from %d", len(avg), len(state)))
	}
	for i, a := range avg {
		checkLen("ema", a.Len, state[i])
		orPanic("ema", be.k.EMA(be.ptr(a), be.ptr(state[i]), d, a.Len))
	}
}
