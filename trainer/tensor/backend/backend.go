// Package backend defines the kernel interface that tensor ops dispatch
// through, and the plain parameter structs those kernels take.
//
// Every kernel works on contiguous row-major float32 buffers whose sizes are
// fully determined by the parameter struct; kernels never allocate tensors and
// never keep references to their arguments after returning. A Buffer is an
// opaque handle into the backend's own memory plus an offset and a length:
// no Go slice ever points into device memory, and the only crossings
// between host and device are the Memory methods, which every backend
// counts. Kernels whose
// name ends in Backward, BackwardData or BackwardFilter ACCUMULATE into their
// gradient outputs (dst += ...), so several consumers of one tensor can add
// their contributions without a temporary. Forward kernels overwrite.
//
// The CPU implementation (package cpu) is the reference; another device
// implements the same methods on its own memory and is checked against it.
package backend

// Gemm describes a (batched) row-major matrix product
//
//	C[b] = Alpha·op(A[b])·op(B[b]) + Beta·C[b]   for b in [0, Batch)
//
// where op(A) is M×K and op(B) is K×N. A[b] starts at b·StrideA (and
// likewise for B and C); a zero StrideA or StrideB shares that operand
// across the batch, while StrideC must not be zero when Batch > 1. Without transposition A is stored M×K and B K×N; with TransA, A is
// stored K×M, with TransB, B is stored N×K. Batch 0 means 1.
type Gemm struct {
	TransA, TransB            bool
	M, N, K                   int
	Alpha, Beta               float32
	Batch                     int
	StrideA, StrideB, StrideC int
}

// Conv describes a 2-D convolution (cross-correlation, dilation 1) of an
// N×InC×InH×InW input with an OutC×(InC/Groups)×KH×KW filter giving an
// N×OutC×OutH()×OutW() output. Zero Stride or Groups mean 1.
type Conv struct {
	N, InC, InH, InW int
	OutC, KH, KW     int
	Stride, Pad      int
	Groups           int
}

// OutH is the output height: (InH + 2·Pad − KH)/Stride + 1.
func (c Conv) OutH() int { return (c.InH+2*c.Pad-c.KH)/c.stride() + 1 }

// OutW is the output width: (InW + 2·Pad − KW)/Stride + 1.
func (c Conv) OutW() int { return (c.InW+2*c.Pad-c.KW)/c.stride() + 1 }

func (c Conv) stride() int {
	if c.Stride <= 0 {
		return 1
	}
	return c.Stride
}

// Norm returns c with zero Stride and Groups replaced by 1.
func (c Conv) Norm() Conv {
	if c.Stride <= 0 {
		c.Stride = 1
	}
	if c.Groups <= 0 {
		c.Groups = 1
	}
	return c
}

// Pool describes a 2-D max pooling of an N×C×H×W input with a K×K window.
// Padded positions never win (they act as −∞, as in PyTorch).
type Pool struct {
	N, C, H, W     int
	K, Stride, Pad int
}

// OutH is the pooled height: (H + 2·Pad − K)/Stride + 1.
func (p Pool) OutH() int { return (p.H+2*p.Pad-p.K)/p.Stride + 1 }

// OutW is the pooled width: (W + 2·Pad − K)/Stride + 1.
func (p Pool) OutW() int { return (p.W+2*p.Pad-p.K)/p.Stride + 1 }

// Unary names an elementwise function with a closed-form derivative.
type Unary int

// Unary functions. Backward kernels receive both x and y = f(x) so each
// derivative uses whichever is cheaper and more accurate.
const (
	SiLU Unary = iota
	Sigmoid
	ReLU
	Exp
	Log
	Abs
	Neg
	Sqrt
	Square
	Atan
	Tanh
)

// Binary names an elementwise function of two operands.
type Binary int

// Binary functions. Maximum and Minimum split the gradient equally between
// equal operands, as PyTorch does.
const (
	Add Binary = iota
	Sub
	Mul
	Div
	Maximum
	Minimum
)

// Broadcast describes the operands of a broadcasting binary op: the
// row-major output Shape and, for every output axis, the element stride of
// each operand in its own buffer (0 along axes the operand is stretched on).
type Broadcast struct {
	Shape            []int
	StrideA, StrideB []int
}

// Strided describes a walk over a row-major index space of the given Shape
// that reads the source at Src strides and writes the destination at Dst
// strides (elements, per axis; 0 repeats an element). It is the one layout
// kernel: permutes, concatenation, splits, broadcasts and axis sums are all
// a Copy with the right strides. With Accumulate the destination is added
// to (dst += src), in row-major order of the walk, which makes a zero Dst
// stride a sum over that axis; distinct indices of axis 0 must then never
// reach the same destination element, because the walk may be split there.
type Strided struct {
	Shape      []int
	Src, Dst   []int
	Accumulate bool
}

// Upsample describes nearest-neighbour upsampling of Planes H×W planes by
// an integer Factor in both directions.
type Upsample struct {
	Planes, H, W, Factor int
}

// Mem is a backend's handle to one allocation: a host array for the CPU, a
// device pointer elsewhere. Host code never looks inside one; only the
// backend that made it does.
type Mem interface {
	// Elems is the allocation's length in 4-byte elements.
	Elems() int
}

// Buffer is a range of backend memory: an opaque allocation and an element
// offset and length into it (elements are 4 bytes: float32, or int32 for
// MaxPool2d's winners). The zero Buffer is "absent" (a nil gamma, an
// unwanted gradient).
type Buffer struct {
	Mem      Mem
	Off, Len int
}

// Slice returns the elements [lo, hi) of b.
func (b Buffer) Slice(lo, hi int) Buffer {
	if lo < 0 || hi < lo || hi > b.Len {
		panic("backend: buffer slice out of range")
	}
	return Buffer{Mem: b.Mem, Off: b.Off + lo, Len: hi - lo}
}

// From returns the elements from off to the end of b.
func (b Buffer) From(off int) Buffer { return b.Slice(off, b.Len) }

// Present reports whether b refers to memory (is not the zero Buffer).
func (b Buffer) Present() bool { return b.Mem != nil }

// Transfers counts the crossings between host and backend memory, and the
// synchronisations, since a backend was made.
type Transfers struct {
	Uploads, Downloads         int64 // calls
	UploadBytes, DownloadBytes int64
	Syncs                      int64
}

// Since returns the crossings from t to later, a later reading of the
// same backend's counters.
func (t Transfers) Since(later Transfers) Transfers {
	return Transfers{Uploads: later.Uploads - t.Uploads, Downloads: later.Downloads - t.Downloads,
		UploadBytes: later.UploadBytes - t.UploadBytes, DownloadBytes: later.DownloadBytes - t.DownloadBytes,
		Syncs: later.Syncs - t.Syncs}
}

// Memory is the part of a backend that owns memory and moves it across the
// host boundary. Crossings are explicit: nothing else reads or writes a
// Buffer from the host.
type Memory interface {
	// Alloc returns a buffer of n elements with unspecified contents,
	// drawn from the backend's pool.
	Alloc(n int) Buffer
	// Free returns a whole buffer Alloc made to the pool; the caller must
	// drop every reference to it. Other buffers are ignored.
	Free(b Buffer)
	// Upload copies len(src) == dst.Len host values into dst.
	Upload(dst Buffer, src []float32)
	// UploadBytes copies host bytes into dst, whose Len·4 must be at least
	// len(src); the bytes keep their order (a uint8 image or mask stack).
	UploadBytes(dst Buffer, src []byte)
	// Download copies src into len(dst) == src.Len host values.
	Download(dst []float32, src Buffer)
	// Host returns b as a host slice without copying, or nil when the
	// memory is not host-addressable (emu, cuda): then only Download reads it.
	Host(b Buffer) []float32
	// Sync waits for every kernel issued so far.
	Sync()
	// Transfers reports the crossings counted so far.
	Transfers() Transfers
}

// Backend is the set of kernels tensor ops dispatch through, and the
// memory they run on.
//
// Layout conventions: images are NCHW; a per-channel vector has length C;
// Softmax views its buffer as outer×n×inner and normalises along n.
type Backend interface {
	// Name identifies the backend in logs and benchmarks.
	Name() string
	Memory

	// Sgemm computes the matrix product described by g.
	Sgemm(g Gemm, a, b, c Buffer)

	// Conv2d writes y = conv(x, w) (no bias).
	Conv2d(p Conv, x, w, y Buffer)
	// Conv2dBackwardData accumulates dx += conv2d's input-gradient for dy.
	// It is also the forward pass of a transposed convolution.
	Conv2dBackwardData(p Conv, dy, w, dx Buffer)
	// Conv2dBackwardDataWrite writes dx = conv2d's input-gradient for dy,
	// every element of dx, which it neither reads nor needs initialised:
	// the first writer of a gradient, and a transposed convolution's
	// output, take an uninitialised buffer. cuDNN does it in one pass
	// (beta 0); the CPU backend zero-fills and accumulates, bit for bit
	// what the accumulation into a zeroed buffer gives.
	Conv2dBackwardDataWrite(p Conv, dy, w, dx Buffer)
	// Conv2dBackwardFilter accumulates dw += conv2d's filter-gradient.
	Conv2dBackwardFilter(p Conv, x, dy, dw Buffer)

	// BatchNormTrain normalises x (N×C×HW) with its own per-channel batch
	// statistics, writing y = gamma·(x−mean)·invstd + beta and the saved
	// mean and invstd = 1/sqrt(biased var + eps); varUnbiased receives the
	// unbiased variance for the running-statistics update (NaN when the
	// channel has a single element).
	BatchNormTrain(n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased Buffer)
	// ChannelAffine writes y = x·scale[c] + shift[c]; an absent scale
	// means 1 (a bias add), and y may be x.
	ChannelAffine(n, c, hw int, x, scale, shift, y Buffer)
	// ChannelSum accumulates dst[c] += Σ over n and hw of x[n,c,hw], each
	// channel summed in float64 in index order (bias gradients, and with
	// n = c = 1 a full sum).
	ChannelSum(n, c, hw int, x, dst Buffer)
	// BatchNormBackward accumulates the training-mode batch-norm
	// gradients into dx, dgamma and dbeta; any of them may be absent.
	BatchNormBackward(n, c, hw int, x, dy, mean, invstd, gamma, dx, dgamma, dbeta Buffer)
	// BatchNormEval writes y = gamma·(x−mean)/sqrt(var+eps) + beta from the
	// running statistics mean and var; absent gamma/beta mean 1 and 0.
	BatchNormEval(n, c, hw int, eps float32, x, gamma, beta, mean, variance, y Buffer)
	// BatchNormEvalBackward accumulates the eval-mode batch-norm gradients
	// into dx, dgamma and dbeta; any of them may be absent.
	BatchNormEvalBackward(n, c, hw int, eps float32, x, dy, gamma, mean, variance, dx, dgamma, dbeta Buffer)

	// MaxPool2d writes the pooled maxima and the flat input index of each
	// winner (within its N×C plane, as int32) to arg.
	MaxPool2d(p Pool, x, y, arg Buffer)
	// MaxPool2dBackward accumulates dy into dx at the recorded winners.
	MaxPool2dBackward(p Pool, dy, arg, dx Buffer)
	// UpsampleNearest writes y, each x pixel repeated into a Factor×Factor block.
	UpsampleNearest(p Upsample, x, y Buffer)
	// UpsampleNearestBackward accumulates into dx the sum of each block of dy.
	UpsampleNearestBackward(p Upsample, dy, dx Buffer)

	// Softmax writes y = softmax(x) along the middle axis of outer×n×inner.
	Softmax(outer, n, inner int, x, y Buffer)
	// SoftmaxBackward accumulates dx += y·(dy − Σ dy·y) along the same axis.
	SoftmaxBackward(outer, n, inner int, y, dy, dx Buffer)

	// Unary writes y = f(x).
	Unary(f Unary, x, y Buffer)
	// UnaryBackward accumulates dx += f'(x)·dy.
	UnaryBackward(f Unary, x, y, dy, dx Buffer)
	// Binary writes y = f(a, b) over the broadcast shape.
	Binary(f Binary, s Broadcast, a, b, y Buffer)
	// BinaryBackward accumulates the gradients of f into da and db (either
	// may be absent), summing over the axes an operand is stretched on.
	BinaryBackward(f Binary, s Broadcast, a, b, dy, da, db Buffer)

	// Fill sets every element of x to v.
	Fill(x Buffer, v float32)
	// Axpby writes y = alpha·x + beta·y elementwise; with beta 0, y is not
	// read (the BLAS convention), so it may hold garbage.
	Axpby(alpha float32, x Buffer, beta float32, y Buffer)
	// Copy walks s, copying (or accumulating) src into dst.
	Copy(s Strided, src, dst Buffer)
	// BytesToFloat writes dst[i] = float32(byte i of src)·scale for the n
	// = dst.Len bytes at the start of src (a uint8 image batch uploaded as
	// it is, widened on the device).
	BytesToFloat(scale float32, src, dst Buffer)
}

// View resolves buffers to a host-kernel backend's own memory, inside
// RunHost only: the slices alias device memory and must not escape the
// kernel.
type View interface {
	// Float32 returns b's elements (nil for the zero Buffer).
	Float32(b Buffer) []float32
	// Int32 returns b's elements read as int32.
	Int32(b Buffer) []int32
	// Bytes returns b's memory as its 4·b.Len bytes, in order (a uint8
	// image or mask stack UploadBytes put there).
	Bytes(b Buffer) []byte
}

// HostKernels is implemented by backends whose kernels run on the host CPU
// (cpu and emu). It is how fused kernels whose CPU implementation is Go
// code — the loss, the optimiser steps, the EMA, clipping — run on a
// backend's memory without crossing it: RunHost calls f once, as one
// kernel launch, with a View of the backend's memory. Nothing f does is a
// transfer, and f must not keep the slices. A device backend does not
// implement it; it supplies device twins of those kernels instead, checked
// against the Go code.
type HostKernels interface {
	RunHost(f func(View))
}

// BNAct is an activation batch-norm applies in its own passes
// (BatchNormActivator).
type BNAct int

// Activations of BatchNormActivator, in the CUDA kernels' order.
const (
	BNIdentity BNAct = iota // y = bn(x)
	BNSiLU                  // y = silu(bn(x)), as SiLU's Unary
)

// BN is the geometry and settings of a BatchNormActivator call: x is
// N×C×HW, Eps is added to the variance, Momentum weights the batch
// statistics in the running update of a training call, and Act is applied
// to the normalised values.
type BN struct {
	N, C, HW int
	Eps      float32
	Momentum float32
	Act      BNAct
}

// BatchNormActivator is implemented by backends whose batch-norm passes
// apply an activation, update the running statistics and can write the
// input gradient instead of adding to it. y = act(bn(x)) is written
// without storing bn(x): the training forward keeps each channel's scale
// and shift (bn(x) = x·scale + shift), and the backward recomputes bn(x)
// from x with them to take dy through the activation's gradient. One pass
// over the data replaces two in each direction, the pre-activation tensor
// and its gradient are never allocated, the running statistics take no
// launches of their own, and x's gradient is written by its first writer
// rather than zero-filled and added to. The CPU backend does not
// implement it, so its batch-norm and SiLU stay separate ops whose results
// are unchanged bit for bit.
type BatchNormActivator interface {
	// BatchNormTrainAct is BatchNormTrain with y = act(bn(x)); affine (2·C:
	// the scales, then the shifts) receives what the backward needs, and
	// may be absent for BNIdentity. runningMean and runningVar, when
	// present, become (1−Momentum)·running + Momentum·batch, with the
	// batch's unbiased variance.
	BatchNormTrainAct(p BN, x, gamma, beta, y, mean, invstd, affine, runningMean, runningVar Buffer)
	// BatchNormBackwardAct is BatchNormBackward for dy, the gradient of
	// act(bn(x)), with BatchNormTrainAct's affine; with writeDx, every
	// element of dx is written and none read.
	BatchNormBackwardAct(p BN, x, dy, mean, invstd, gamma, affine, dx, dgamma, dbeta Buffer, writeDx bool)
	// BatchNormEvalAct is BatchNormEval with y = act(bn(x)).
	BatchNormEvalAct(p BN, x, gamma, beta, mean, variance, y Buffer)
	// BatchNormEvalBackwardAct is BatchNormEvalBackward for dy, the
	// gradient of act(bn(x)) (beta recomputes bn(x)); with writeDx, dx is
	// written as by BatchNormBackwardAct.
	BatchNormEvalBackwardAct(p BN, x, dy, gamma, beta, mean, variance, dx, dgamma, dbeta Buffer, writeDx bool)
}

// HostBackend is a backend whose kernels run on host memory it can view
// (cpu, emu): what trainer/device hands the loss and the optimiser as
// their host kernels when such a device opens.
type HostBackend interface {
	Backend
	HostKernels
}

// HostMemory is a host backend whose memory is the host's own (the CPU
// backend): Wrap returns host values as one of its buffers without a
// copy, so that a caller's slices (a test's inputs, a reference
// computation's parameters) are used in place. The emulated device has the
// method but hides its memory, and panics.
type HostMemory interface {
	HostBackend
	Wrap(data []float32) Buffer
}
