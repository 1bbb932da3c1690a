package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// engine is what a Backend needs from the machine under it: memory,
// copies across the host boundary, kernel launches, cuBLAS's GEMM and
// cuDNN's convolutions. A GPU (gpuEngine over a Device) implements it;
// so does the test-only CPU harness, which runs the same kernels compiled
// with g++ and naive stand-ins for cuBLAS and cuDNN, so that everything
// the Backend does in Go — the method mapping, argument packing, strides,
// accumulate flags, the plan cache — runs on hosts without a GPU.
type engine interface {
	launcher
	alloc(bytes int) (devptr, error)
	free(p devptr) error
	// upload and download copy synchronously: when they return, src may
	// be reused and dst holds the data.
	upload(dst devptr, src []byte) error
	download(dst []byte, src devptr) error
	sync() error
	gemm(g backend.Gemm, a, b, c devptr) error
	// planConv prepares c's three passes (cuDNN's algorithm search and
	// workspace sizes on a GPU); the Backend caches one plan per shape.
	planConv(c convShape) (*convPlan, error)
	convForward(p *convPlan, x, w, y devptr) error
	convBackwardData(p *convPlan, dy, w, dx devptr, accumulate bool) error
	convBackwardFilter(p *convPlan, x, dy, dw devptr) error
	// stageQueue opens the copy stream a Backend's Stager uploads
	// batches on (see stage.go).
	stageQueue() (stageQueue, error)
	// hold runs f with a launcher and GEMMs that queue without taking the
	// device once per call: a multi-launch step (Newton–Schulz's thirty
	// calls a matrix) pays for one lock and context check. f must use
	// only what it is given.
	hold(f func(l launcher, mm matmul) error) error
	close() error
}

// Backend is backend.Backend on one GPU's memory: buffers are
// stream-ordered allocations from the device's memory pool, every kernel
// is queued on the device's compute stream, and the only host crossings
// are the Memory methods, counted in Transfers as the CPU backend counts
// them. Sgemm is cuBLAS's strided-batched GEMM, convolutions are cuDNN's
// with one plan (algorithms and workspace sizes) per shape, and the rest
// are the project's own kernels (Kernels). Batches go up through
// backend.Stager (Stage: pinned double-buffered slots on a copy stream of
// its own) rather than Upload on the compute stream.
//
// It does not implement backend.HostKernels: Go-coded kernels run as
// host code on a backend without it, crossing to the host (counted). The
// optimiser steps, gradient clipping and norms and the EMA update have
// device twins instead (trainer/optim's DeviceKernels, in optim.go), so
// they never cross; nor does the loss (its device kernels, a module
// trainer/loss/losscuda declares and launches by name), whose result comes
// down through backend.Fetcher (fetch.go) without waiting for the device.
//
// Its methods panic on a device error (a launch that fails, memory that
// runs out): the backend.Backend interface has no error results, and a
// step cannot continue on a device that failed.
type Backend struct {
	e    engine
	k    *kernelSet
	name string

	plansMu sync.Mutex
	plans   map[convShape]*convPlan
	planned atomic.Int64

	ups, downs, upBytes, downBytes, syncs atomic.Int64

	// held is the device memory of live buffers, heldPeak its largest
	// value since ResetHeldPeak, heldAtGC its value after the last
	// collection reclaim forced; lostFrees counts cleanups whose free
	// failed; closed stops cleanups once Close took the context.
	held, heldPeak, heldAtGC, lostFrees atomic.Int64
	closed                              atomic.Bool

	// ws is the optimiser kernels' device workspace (see scratch).
	wsMu    sync.Mutex
	ws      devptr
	wsBytes int

	// mt caches multi-tensor tables by content (see mt.go).
	mtMu       sync.Mutex
	mt         map[string]mtTable
	tableBytes int64
	// staging is the batch path's double-buffered Stager (stage_backend.go).
	staging staging
	// fetching serves backend.Fetcher (fetch.go).
	fetching fetching
}

var _ backend.Backend = (*Backend)(nil)

// Options selects a Backend's arithmetic. The zero value is strict fp32,
// within the CPU reference's tolerance; Precision("tf32") is PyTorch's
// defaults.
type Options struct {
	// TF32 lets cuBLAS's GEMMs and cuDNN's convolutions use tensor cores
	// with inputs rounded to TF32 (10-bit mantissas): faster, no longer
	// within the CPU reference's tolerance. It is both of PyTorch's
	// switches on (torch.backends.cuda.matmul.allow_tf32 and
	// torch.backends.cudnn.allow_tf32); SEGPIPE_TF32=1 sets it.
	TF32 bool
	// ConvTF32 lets the convolutions alone use TF32, the GEMMs staying
	// fp32 with CUBLAS_DEFAULT_MATH: PyTorch's defaults (cudnn.allow_tf32
	// True, matmul.allow_tf32 False). With TF32 in either, each
	// convolution pass runs in the math type cuDNN's search reported for
	// the algorithm it chose.
	ConvTF32 bool
}

// Precisions are the names Precision knows, for flag help.
var Precisions = []string{"fp32", "tf32"}

// Precision returns the Options a precision name selects: "fp32" (strict:
// no TF32 anywhere, for comparisons with the CPU) or "tf32" (PyTorch's
// defaults: TF32 convolutions, fp32 GEMMs). An empty name is "tf32".
func Precision(name string) (Options, error) {
	switch name {
	case "fp32":
		return Options{}, nil
	case "tf32", "":
		return Options{ConvTF32: true}, nil
	}
	return Options{}, fmt.Errorf("cuda: precision %q: want fp32 or tf32", name)
}

// NewBackend opens GPU ordinal as a Backend: its context, compute stream,
// memory pool, kernels, a cuBLAS and a cuDNN handle, and pinned staging
// for the host crossings. Without a driver, libraries or a device the
// error wraps ErrUnavailable and says what is missing.
func NewBackend(ordinal int, opt Options) (*Backend, error) {
	d, err := open(ordinal)
	if err != nil {
		return nil, err
	}
	e, err := newGPUEngine(d, opt)
	if err != nil {
		d.Close()
		return nil, err
	}
	return newBackend(e, &kernelSet{l: e, maxBlocks: max(d.SMs, 1) * 8}), nil
}

func newBackend(e engine, k *kernelSet) *Backend {
	return &Backend{e: e, k: k, name: "cuda", plans: map[convShape]*convPlan{}}
}

// Close waits for the device, destroys the cached plans and handles, and
// releases the context. Buffers still allocated go with it.
func (be *Backend) Close() error {
	stageErr := errors.Join(be.closeFetching(), be.closeStaging())
	be.closed.Store(true)
	be.plansMu.Lock()
	be.plans = map[convShape]*convPlan{}
	be.plansMu.Unlock()
	be.wsMu.Lock()
	if be.ws != 0 {
		be.e.free(be.ws) // the context goes with close; its error is close's
		be.ws, be.wsBytes = 0, 0
	}
	be.wsMu.Unlock()
	be.mtMu.Lock()
	be.dropTables()
	be.mtMu.Unlock()
	return errors.Join(stageErr, be.e.close())
}

// Name reports "cuda".
func (be *Backend) Name() string { return be.name }

// mem is one device allocation. Code above the backend frees what it
// knows is dead (a step's activations, through the tape) and leaves the
// rest — an inference pass's activations, an uploaded input — to Go's
// collector, as the CPU backend's memory is. Device memory is invisible to
// the collector, so each handle carries a cleanup that returns its
// allocation once the handle is unreachable, and Alloc forces a
// collection whenever the device memory held grows by gcStep (see
// reclaim): a dropped buffer is then given back, not leaked.
type mem struct {
	be *Backend
	p  devptr
	n  int
	// cell is nil for a staging slot, which its Stager owns and frees.
	cell *devCell
}

// devCell is what a mem's cleanup needs: the address, its size, and
// whether Free already returned it (the cleanup must not see the mem).
type devCell struct {
	be    *Backend
	p     devptr
	bytes int64
	freed atomic.Bool
}

// gcStep is the growth of held device memory that triggers a collection,
// so that unreachable buffers' cleanups run before the pool runs dry.
const gcStep = 1 << 30

// release returns c's allocation once, whichever of Free and the cleanup
// comes first; after Close the context has taken it already.
func (c *devCell) release() error {
	if c.freed.Swap(true) {
		return nil
	}
	c.be.held.Add(-c.bytes)
	if c.be.closed.Load() {
		return nil
	}
	return c.be.e.free(c.p)
}

// dropped is the cleanup of an unreachable mem. It runs on the runtime's
// cleanup goroutine, where a panic would kill the process: a failed free
// is counted instead (the device is failing anyway).
func dropped(c *devCell) {
	if c.release() != nil {
		c.be.lostFrees.Add(1)
	}
}

// reclaim runs a collection when the device memory held has grown by
// gcStep since the last one, so that the cleanups of dropped buffers
// return their memory.
func (be *Backend) reclaim() {
	if h := be.held.Load(); h-be.heldAtGC.Load() > gcStep {
		runtime.GC()
		be.heldAtGC.Store(be.held.Load())
	}
}

func (m *mem) Elems() int { return m.n }

// orPanic panics with the error of a failed device call.
func orPanic(op string, err error) {
	if err != nil {
		panic(fmt.Errorf("cuda backend: %s: %w", op, err))
	}
}

// ptr resolves a buffer to its device address (0 for the zero Buffer).
func (be *Backend) ptr(b backend.Buffer) devptr {
	if b.Mem == nil {
		return 0
	}
	m, ok := b.Mem.(*mem)
	if !ok || m.be != be {
		panic(fmt.Sprintf("cuda backend: given a buffer of another backend (%T)", b.Mem))
	}
	if b.Off < 0 || b.Len < 0 || b.Off+b.Len > m.n {
		panic(fmt.Sprintf("cuda backend: buffer [%d, %d) outside its allocation of %d", b.Off, b.Off+b.Len, m.n))
	}
	return m.p.Add(4 * b.Off)
}

// Alloc returns n elements from the device's memory pool, ordered on the
// compute stream.
func (be *Backend) Alloc(n int) backend.Buffer {
	be.reclaim()
	p, err := be.e.alloc(4 * n)
	if err != nil {
		// The pool may be full of buffers nothing refers to any more:
		// collect, give their cleanups a moment, and try once more.
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		p, err = be.e.alloc(4 * n)
	}
	orPanic(fmt.Sprintf("alloc %d floats", n), err)
	c := &devCell{be: be, p: p, bytes: int64(4 * n)}
	for h := be.held.Add(c.bytes); ; {
		if pk := be.heldPeak.Load(); h <= pk || be.heldPeak.CompareAndSwap(pk, h) {
			break
		}
	}
	m := &mem{be: be, p: p, n: n, cell: c}
	runtime.AddCleanup(m, dropped, c)
	return backend.Buffer{Mem: m, Len: n}
}

// Held returns the device memory of the buffers alive now and the most
// they held at once since ResetHeldPeak (or the start), in bytes: what a
// training step needs, plus what the collector has not yet returned (a
// dropped buffer counts until it is collected).
func (be *Backend) Held() (now, peak int64) { return be.held.Load(), be.heldPeak.Load() }

// ResetHeldPeak starts a new peak from the memory held now.
func (be *Backend) ResetHeldPeak() { be.heldPeak.Store(be.held.Load()) }

// Free returns a whole buffer Alloc made to the pool once the stream's
// prior work is done; views, staged buffers and other buffers are ignored.
func (be *Backend) Free(b backend.Buffer) {
	m, ok := b.Mem.(*mem)
	if !ok || m.be != be || b.Off != 0 || b.Len != m.n || m.p == 0 || m.cell == nil {
		return
	}
	orPanic("free", m.cell.release())
	m.p = 0
}

// Upload copies host values into dst through pinned staging.
func (be *Backend) Upload(dst backend.Buffer, src []float32) {
	if len(src) != dst.Len {
		panic(fmt.Sprintf("cuda backend: Upload of %d values into a buffer of %d", len(src), dst.Len))
	}
	be.ups.Add(1)
	be.upBytes.Add(int64(4 * len(src)))
	if len(src) == 0 {
		return
	}
	orPanic("upload", be.e.upload(be.ptr(dst), backend.Bytes(src)))
}

// UploadBytes copies host bytes into dst's memory in order.
func (be *Backend) UploadBytes(dst backend.Buffer, src []byte) {
	if len(src) > 4*dst.Len {
		panic(fmt.Sprintf("cuda backend: UploadBytes of %d bytes into a buffer of %d elements", len(src), dst.Len))
	}
	be.ups.Add(1)
	be.upBytes.Add(int64(len(src)))
	if len(src) == 0 {
		return
	}
	orPanic("upload", be.e.upload(be.ptr(dst), src))
}

// Download copies src into host values after the stream's prior work.
func (be *Backend) Download(dst []float32, src backend.Buffer) {
	if len(dst) != src.Len {
		panic(fmt.Sprintf("cuda backend: Download of a buffer of %d into %d values", src.Len, len(dst)))
	}
	be.downs.Add(1)
	be.downBytes.Add(int64(4 * len(dst)))
	if len(dst) == 0 {
		return
	}
	orPanic("download", be.e.download(backend.Bytes(dst), be.ptr(src)))
}

// Host returns nil: device memory is not host-addressable.
func (be *Backend) Host(backend.Buffer) []float32 { return nil }

// Sync waits for the compute stream; it is counted.
func (be *Backend) Sync() {
	be.syncs.Add(1)
	orPanic("sync", be.e.sync())
}

// Transfers reports the crossings since the backend was made.
func (be *Backend) Transfers() backend.Transfers {
	return backend.Transfers{Uploads: be.ups.Load(), Downloads: be.downs.Load(),
		UploadBytes: be.upBytes.Load(), DownloadBytes: be.downBytes.Load(), Syncs: be.syncs.Load()}
}

// Sgemm is cuBLAS's strided-batched SGEMM through the row-major identities.
func (be *Backend) Sgemm(g backend.Gemm, a, b, c backend.Buffer) {
	orPanic("sgemm", be.e.gemm(g, be.ptr(a), be.ptr(b), be.ptr(c)))
}

// plan returns the cached plan of p's shape, planning it on first use.
func (be *Backend) plan(p backend.Conv) *convPlan {
	c := convShape(p.Norm())
	be.plansMu.Lock()
	defer be.plansMu.Unlock()
	if pl, ok := be.plans[c]; ok {
		return pl
	}
	pl, err := be.e.planConv(c)
	orPanic("plan convolution", err)
	be.plans[c] = pl
	be.planned.Add(1)
	return pl
}

// Conv2d writes y = conv(x, w) with cuDNN (beta 0).
func (be *Backend) Conv2d(p backend.Conv, x, w, y backend.Buffer) {
	orPanic("conv2d", be.e.convForward(be.plan(p), be.ptr(x), be.ptr(w), be.ptr(y)))
}

// Conv2dBackwardData accumulates dx += the input gradient (beta 1).
func (be *Backend) Conv2dBackwardData(p backend.Conv, dy, w, dx backend.Buffer) {
	orPanic("conv2d backward data", be.e.convBackwardData(be.plan(p), be.ptr(dy), be.ptr(w), be.ptr(dx), true))
}

// Conv2dBackwardDataWrite writes dx = the input gradient: cuDNN's backward
// data with beta 0, which neither reads dx nor needs it zeroed.
func (be *Backend) Conv2dBackwardDataWrite(p backend.Conv, dy, w, dx backend.Buffer) {
	orPanic("conv2d backward data", be.e.convBackwardData(be.plan(p), be.ptr(dy), be.ptr(w), be.ptr(dx), false))
}

// Conv2dBackwardFilter accumulates dw += the filter gradient (beta 1).
func (be *Backend) Conv2dBackwardFilter(p backend.Conv, x, dy, dw backend.Buffer) {
	orPanic("conv2d backward filter", be.e.convBackwardFilter(be.plan(p), be.ptr(x), be.ptr(dy), be.ptr(dw)))
}

// BatchNormTrain runs the bn_train kernel (statistics in double, one
// block per channel) or, for channels longer than a tile, the tiled
// kernels; varUnbiased is NaN for a single element as on the CPU.
func (be *Backend) BatchNormTrain(n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased backend.Buffer) {
	be.batchNormTrain(backend.BN{N: n, C: c, HW: hw, Eps: eps}, x, gamma, beta, y, mean, invstd, varUnbiased, backend.Buffer{},
		backend.Buffer{}, backend.Buffer{})
}

// BatchNormTrainAct implements backend.BatchNormActivator: the activation
// is applied in the normalising pass and the running statistics are
// updated by the kernel that computes the batch's.
func (be *Backend) BatchNormTrainAct(p backend.BN, x, gamma, beta, y, mean, invstd, affine, runningMean, runningVar backend.Buffer) {
	be.batchNormTrain(p, x, gamma, beta, y, mean, invstd, backend.Buffer{}, affine, runningMean, runningVar)
}

func (be *Backend) batchNormTrain(p backend.BN, x, gamma, beta, y, mean, invstd, varUnbiased, affine, runningMean, runningVar backend.Buffer) {
	a := bnMode{Act: p.Act}
	run := bnRunning{Mean: be.ptr(runningMean), Var: be.ptr(runningVar), Momentum: p.Momentum}
	if run.Mean == 0 || run.Var == 0 {
		run = bnRunning{}
	}
	n, c, hw := p.N, p.C, p.HW
	if tmp, partial, coef, ok := be.bnScratch(n, c, hw); ok {
		orPanic("batch-norm", be.k.BatchNormTrainTiled(a, n, c, hw, p.Eps, be.ptr(x), be.ptr(gamma), be.ptr(beta), be.ptr(y),
			be.ptr(mean), be.ptr(invstd), be.ptr(varUnbiased), be.ptr(affine), run, partial, coef))
		be.Free(tmp)
		return
	}
	orPanic("batch-norm", be.k.BatchNormTrain(a, n, c, hw, p.Eps, be.ptr(x), be.ptr(gamma), be.ptr(beta), be.ptr(y),
		be.ptr(mean), be.ptr(invstd), be.ptr(varUnbiased), be.ptr(affine), run))
}

var _ backend.BatchNormActivator = (*Backend)(nil)

// bnScratch allocates the tiled batch-norm's partial sums and per-channel
// coefficients when n×c×hw takes the tiled kernels (ok); the caller frees
// tmp once the kernels are queued (frees are stream-ordered).
func (be *Backend) bnScratch(n, c, hw int) (tmp backend.Buffer, partial, coef devptr, ok bool) {
	_, tiles := be.k.BNTiles(n, c, hw)
	if tiles == 0 {
		return backend.Buffer{}, 0, 0, false
	}
	tmp = be.Alloc(4*tiles + 4*c) // 2 float64s per tile, 4 floats per channel
	partial = be.ptr(tmp)
	return tmp, partial, partial.Add(16 * tiles), true
}

// ChannelAffine writes y = x·scale[c] + shift[c]; an absent scale is 1.
func (be *Backend) ChannelAffine(n, c, hw int, x, scale, shift, y backend.Buffer) {
	orPanic("channel affine", be.k.ChannelAffine(backend.BNIdentity, be.ptr(x), be.ptr(scale), be.ptr(shift), be.ptr(y), n, c, hw))
}

// ChannelSum accumulates dst[c] += Σ x over n and hw, in double.
func (be *Backend) ChannelSum(n, c, hw int, x, dst backend.Buffer) {
	orPanic("channel sum", be.k.BiasGrad(be.ptr(x), be.ptr(dst), n, c, hw))
}

// BatchNormBackward accumulates the training-mode gradients.
func (be *Backend) BatchNormBackward(n, c, hw int, x, dy, mean, invstd, gamma, dx, dgamma, dbeta backend.Buffer) {
	be.BatchNormBackwardAct(backend.BN{N: n, C: c, HW: hw}, x, dy, mean, invstd, gamma, backend.Buffer{}, dx, dgamma, dbeta, false)
}

// BatchNormBackwardAct implements backend.BatchNormActivator.
func (be *Backend) BatchNormBackwardAct(p backend.BN, x, dy, mean, invstd, gamma, affine, dx, dgamma, dbeta backend.Buffer, writeDx bool) {
	a := bnMode{Act: p.Act, WriteDx: writeDx}
	n, c, hw := p.N, p.C, p.HW
	if tmp, partial, coef, ok := be.bnScratch(n, c, hw); ok {
		orPanic("batch-norm backward", be.k.BatchNormBackwardTiled(a, n, c, hw, be.ptr(x), be.ptr(dy), be.ptr(mean), be.ptr(invstd),
			be.ptr(gamma), be.ptr(affine), be.ptr(dx), be.ptr(dgamma), be.ptr(dbeta), partial, coef))
		be.Free(tmp)
		return
	}
	orPanic("batch-norm backward", be.k.BatchNormBackward(a, n, c, hw, be.ptr(x), be.ptr(dy), be.ptr(mean), be.ptr(invstd),
		be.ptr(gamma), be.ptr(affine), be.ptr(dx), be.ptr(dgamma), be.ptr(dbeta)))
}

// evalScale allocates and fills the per-channel invstd, scale and (when
// wanted) shift of eval-mode batch-norm; the caller frees the buffer.
func (be *Backend) evalScale(c int, eps float32, gamma, beta, mean, variance backend.Buffer, shift bool) (tmp, invstd, scale, sh backend.Buffer) {
	tmp = be.Alloc(3 * c)
	invstd, scale = tmp.Slice(0, c), tmp.Slice(c, 2*c)
	if shift {
		sh = tmp.Slice(2*c, 3*c)
	}
	orPanic("batch-norm eval scale", be.k.BatchNormEvalScale(c, eps, be.ptr(gamma), be.ptr(beta), be.ptr(mean), be.ptr(variance),
		be.ptr(invstd), be.ptr(scale), be.ptr(sh)))
	return tmp, invstd, scale, sh
}

// BatchNormEval folds the running statistics into one affine per channel.
func (be *Backend) BatchNormEval(n, c, hw int, eps float32, x, gamma, beta, mean, variance, y backend.Buffer) {
	be.BatchNormEvalAct(backend.BN{N: n, C: c, HW: hw, Eps: eps}, x, gamma, beta, mean, variance, y)
}

// BatchNormEvalAct implements backend.BatchNormActivator.
func (be *Backend) BatchNormEvalAct(p backend.BN, x, gamma, beta, mean, variance, y backend.Buffer) {
	tmp, _, scale, shift := be.evalScale(p.C, p.Eps, gamma, beta, mean, variance, true)
	orPanic("batch-norm eval", be.k.ChannelAffine(p.Act, be.ptr(x), be.ptr(scale), be.ptr(shift), be.ptr(y), p.N, p.C, p.HW))
	be.Free(tmp)
}

// BatchNormEvalBackward accumulates the eval-mode gradients.
func (be *Backend) BatchNormEvalBackward(n, c, hw int, eps float32, x, dy, gamma, mean, variance, dx, dgamma, dbeta backend.Buffer) {
	be.BatchNormEvalBackwardAct(backend.BN{N: n, C: c, HW: hw, Eps: eps}, x, dy, gamma, backend.Buffer{}, mean, variance, dx, dgamma, dbeta, false)
}

// BatchNormEvalBackwardAct implements backend.BatchNormActivator; the
// shift that recomputes bn(x) is folded only for an activation.
func (be *Backend) BatchNormEvalBackwardAct(p backend.BN, x, dy, gamma, beta, mean, variance, dx, dgamma, dbeta backend.Buffer, writeDx bool) {
	a := bnMode{Act: p.Act, WriteDx: writeDx}
	n, c, hw := p.N, p.C, p.HW
	tmp, invstd, scale, shift := be.evalScale(c, p.Eps, gamma, beta, mean, variance, p.Act != backend.BNIdentity)
	defer be.Free(tmp)
	if scr, partial, coef, ok := be.bnScratch(n, c, hw); ok {
		orPanic("batch-norm eval backward", be.k.BatchNormEvalBackwardTiled(a, n, c, hw, be.ptr(x), be.ptr(dy), be.ptr(mean), be.ptr(invstd),
			be.ptr(scale), be.ptr(shift), be.ptr(dx), be.ptr(dgamma), be.ptr(dbeta), partial, coef))
		be.Free(scr)
		return
	}
	orPanic("batch-norm eval backward", be.k.BatchNormEvalBackward(a, n, c, hw, be.ptr(x), be.ptr(dy), be.ptr(mean), be.ptr(invstd),
		be.ptr(scale), be.ptr(shift), be.ptr(dx), be.ptr(dgamma), be.ptr(dbeta)))
}

// MaxPool2d records int32 winners within each plane, the first maximum in
// row-major window order winning (PyTorch's rule).
func (be *Backend) MaxPool2d(p backend.Pool, x, y, arg backend.Buffer) {
	orPanic("max pool", be.k.MaxPool(poolShape(p), be.ptr(x), be.ptr(y), be.ptr(arg)))
}

// MaxPool2dBackward accumulates dy into dx at the recorded winners.
func (be *Backend) MaxPool2dBackward(p backend.Pool, dy, arg, dx backend.Buffer) {
	orPanic("max pool backward", be.k.MaxPoolBackward(poolShape(p), be.ptr(dy), be.ptr(arg), be.ptr(dx)))
}

// UpsampleNearest repeats each pixel into a Factor×Factor block.
func (be *Backend) UpsampleNearest(p backend.Upsample, x, y backend.Buffer) {
	orPanic("upsample", be.k.UpsampleNearest(be.ptr(x), be.ptr(y), p.Planes, p.H, p.W, p.Factor))
}

// UpsampleNearestBackward accumulates each block's sum into dx.
func (be *Backend) UpsampleNearestBackward(p backend.Upsample, dy, dx backend.Buffer) {
	orPanic("upsample backward", be.k.UpsampleNearestBackward(be.ptr(dy), be.ptr(dx), p.Planes, p.H, p.W, p.Factor))
}

// Softmax normalises along the middle axis of outer×n×inner.
func (be *Backend) Softmax(outer, n, inner int, x, y backend.Buffer) {
	orPanic("softmax", be.k.Softmax(be.ptr(x), be.ptr(y), outer, n, inner))
}

// SoftmaxBackward accumulates dx += y·(dy − Σ dy·y).
func (be *Backend) SoftmaxBackward(outer, n, inner int, y, dy, dx backend.Buffer) {
	orPanic("softmax backward", be.k.SoftmaxBackward(be.ptr(y), be.ptr(dy), be.ptr(dx), outer, n, inner))
}

// Unary writes y = f(x).
func (be *Backend) Unary(f backend.Unary, x, y backend.Buffer) {
	orPanic("unary", be.k.Unary(f, be.ptr(x), be.ptr(y), x.Len))
}

// UnaryBackward accumulates dx += f'(x)·dy.
func (be *Backend) UnaryBackward(f backend.Unary, x, y, dy, dx backend.Buffer) {
	orPanic("unary backward", be.k.UnaryBackward(f, be.ptr(x), be.ptr(y), be.ptr(dy), be.ptr(dx), dy.Len))
}

// Binary writes y = f(a, b) over the broadcast shape.
func (be *Backend) Binary(f backend.Binary, s backend.Broadcast, a, b, y backend.Buffer) {
	orPanic("binary", be.k.Binary(f, s, be.ptr(a), be.ptr(b), be.ptr(y)))
}

// BinaryBackward accumulates f's gradients into da and db (either absent).
func (be *Backend) BinaryBackward(f backend.Binary, s backend.Broadcast, a, b, dy, da, db backend.Buffer) {
	orPanic("binary backward", be.k.BinaryBackward(f, s, be.ptr(a), be.ptr(b), be.ptr(dy), be.ptr(da), be.ptr(db)))
}

// Fill sets every element of x to v.
func (be *Backend) Fill(x backend.Buffer, v float32) {
	orPanic("fill", be.k.Fill(be.ptr(x), v, x.Len))
}

// Axpby writes y = alpha·x + beta·y; with beta 0 y is not read (a scale
// kernel writes it), so garbage or NaN in y does not leak through.
func (be *Backend) Axpby(alpha float32, x backend.Buffer, beta float32, y backend.Buffer) {
	if beta == 0 {
		orPanic("axpby", be.k.Scale(be.ptr(x), be.ptr(y), alpha, false, x.Len))
		return
	}
	orPanic("axpby", be.k.Axpby(be.ptr(x), be.ptr(y), beta, alpha, x.Len))
}

// Copy walks s, copying or (with Accumulate) adding src into dst.
func (be *Backend) Copy(s backend.Strided, src, dst backend.Buffer) {
	orPanic("copy", be.k.Copy(s, be.ptr(src), be.ptr(dst)))
}

// BytesToFloat widens the first dst.Len bytes of src times scale.
func (be *Backend) BytesToFloat(scale float32, src, dst backend.Buffer) {
	orPanic("bytes to float", be.k.BytesToFloat(be.ptr(src), be.ptr(dst), scale, dst.Len))
}
