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

func (m engineMatmul) Gemm(g backend.Gemm, a, b, c devptr) error { return m.e.gemm(g, a, b, c) }

// scratch returns at least bytes of the Backend's device workspace (the
// reduction partials, Newton–Schulz's matrices), grown as needed. The
// caller holds wsMu until its last launch using it is queued: launches on
// the one stream run in order, so the next user cannot overtake them.
func (be *Backend) scratch(bytes int) devptr {
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

// SGDNesterovSteps is trainer/optim's Nesterov SGD step on a list of
// parameters (their gradients and momentum buffers): one mt_sgd_nesterov
// launch over the list's cached table.
func (be *Backend) SGDNesterovSteps(params, grads, bufs []backend.Buffer, first []bool, lr, momentum, weightDecay, weight float64) {
	var l mtList
	for i, p := range params {
		checkLen("sgd step", p.Len, grads[i], bufs[i])
		l.add(p.Len, first[i], be.ptr(p), be.ptr(grads[i]), be.ptr(bufs[i]))
	}
	orPanic("sgd step", be.mtLaunch(kMtSGDNesterov, &l, f32Arg(float32(lr*weight)), f32Arg(float32(momentum)), f32Arg(float32(weightDecay))))
}

// AdamWSteps is trainer/optim's AdamW step t on a list of parameters
// (their gradients and moments): one mt_adamw launch, the bias
// corrections derived on the host in double as the single-tensor kernel's.
func (be *Backend) AdamWSteps(params, grads, m, v []backend.Buffer, lr, weightDecay, beta1, beta2, eps float64, t int) {
	var l mtList
	for i, p := range params {
		checkLen("adamw step", p.Len, grads[i], m[i], v[i])
		l.add(p.Len, false, be.ptr(p), be.ptr(grads[i]), be.ptr(m[i]), be.ptr(v[i]))
	}
	decay, stepSize, inv := adamWScalars(lr, weightDecay, beta1, beta2, t)
	orPanic("adamw step", be.mtLaunch(kMtAdamW, &l, f32Arg(decay), f32Arg(float32(beta1)), f32Arg(float32(beta2)),
		f32Arg(stepSize), f32Arg(inv), f32Arg(float32(eps))))
}

// ZeroGrads clears every buffer of grads in one mt_fill launch.
func (be *Backend) ZeroGrads(grads []backend.Buffer) {
	orPanic("zero gradients", be.mtLaunch(kMtFill, be.list(grads), f32Arg(0)))
}

// list describes bufs as a one-pointer tensor list.
func (be *Backend) list(bufs ...[]backend.Buffer) *mtList {
	var l mtList
	for i, b := range bufs[0] {
		ptrs := make([]devptr, len(bufs))
		for k := range bufs {
			checkLen("multi-tensor list", b.Len, bufs[k][i])
			ptrs[k] = be.ptr(bufs[k][i])
		}
		l.add(b.Len, false, ptrs...)
	}
	return &l
}

// mtLaunch queues kernel kn over l's table.
func (be *Backend) mtLaunch(kn kernel, l *mtList, args ...arg) error {
	t, err := be.table(l)
	if err != nil {
		return err
	}
	return be.k.mtRun(kn, t, args...)
}

// MuonSteps is MuSGD's Muon part on a list of rows×cols parameters that
// share the momentum and the step: each one's momentum and Nesterov blend
// into its slot of a batch u, then (step ≠ 0) Newton–Schulz of the whole
// batch at once (NewtonSchulz: strided-batched products on cuBLAS), and
// each param −= step·out. u, out and Newton–Schulz's matrices are the
// Backend's workspace.
func (be *Backend) MuonSteps(params, grads, m []backend.Buffer, rows, cols int, momentum float64, step float32) {
	count, n := len(params), rows*cols
	if len(grads) != count || len(m) != count {
		panic(fmt.Sprintf("cuda backend: muon step of %d parameters given %d gradients and %d momentum buffers", count, len(grads), len(m)))
	}
	if count == 0 {
		return
	}
	for i := range params {
		checkLen("muon step", n, params[i], grads[i], m[i])
	}
	be.wsMu.Lock()
	defer be.wsMu.Unlock()
	bytes := 4 * count * n
	if step != 0 {
		bytes += 4*count*n + be.k.NewtonSchulzBytes(rows, cols, count)
	}
	u := be.scratch(bytes) // before hold: it may allocate
	out := u.Add(4 * count * n)
	ns := out.Add(4 * count * n)
	// The momentum and the update are one multi-tensor launch each over
	// the group, their tables (cached: the workspace and the parameters
	// stay where they are from step to step) found before hold.
	var blend, update mtList
	for i := range params {
		blend.add(n, false, be.ptr(grads[i]), be.ptr(m[i]), u.Add(4*i*n))
		update.add(n, false, be.ptr(params[i]), out.Add(4*i*n))
	}
	tb, err := be.table(&blend)
	orPanic("muon step", err)
	var tu mtTable
	if step != 0 {
		tu, err = be.table(&update)
		orPanic("muon step", err)
	}
	// The batch's launches and GEMMs take the device once.
	orPanic("muon step", be.e.hold(func(l launcher, mm matmul) error {
		kk := *be.k
		kk.l = l
		k := &kk
		if err := k.mtRun(kMtMuonMomentum, tb, f32Arg(float32(1-momentum)), f32Arg(float32(momentum))); err != nil {
			return fmt.Errorf("momentum: %w", err)
		}
		if step == 0 {
			return nil // trainer/optim skips the orthogonalisation of a zero step
		}
		if err := k.NewtonSchulz(mm, out, u, rows, cols, count, ns); err != nil {
			return fmt.Errorf("newton-schulz: %w", err)
		}
		return k.mtRun(kMtAxpby, tu, f32Arg(1), f32Arg(-step))
	}))
}

// globalNorm queues the L2 norm of grads into y (mt_sum_squares, one
// partial per chunk, then reduce_finish); the caller holds wsMu. It
// returns y and the workspace past the partials, extra bytes long.
func (be *Backend) globalNorm(grads []backend.Buffer, y devptr, extra int) (devptr, devptr) {
	t, err := be.table(be.list(grads))
	orPanic("global norm", err)
	ws := be.scratch(8*t.nchunks + extra)
	rest := ws.Add(8 * t.nchunks)
	if y == 0 {
		y = rest
	}
	if t.nchunks == 0 {
		orPanic("global norm", be.k.Fill(y, 0, 1))
		return y, rest
	}
	orPanic("global norm", be.k.mtRun(kMtSumSquares, t, ptrArg(ws)))
	orPanic("global norm", be.k.finish(ws, t.nchunks, y, 1, true))
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
	var y devptr
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
	orPanic("clip", be.mtLaunch(kMtScaleBy, be.list(grads), ptrArg(coef)))
}

// EMAUpdate folds state into avg (ema_update on every pair, one mt_ema
// launch): avg = avg·d + (1 − d)·state.
func (be *Backend) EMAUpdate(avg, state []backend.Buffer, d float32) {
	if len(avg) != len(state) {
		panic(fmt.Sprintf("cuda backend: ema of %d buffers updated from %d", len(avg), len(state)))
	}
	orPanic("ema", be.mtLaunch(kMtEMA, be.list(avg, state), f32Arg(d)))
}
