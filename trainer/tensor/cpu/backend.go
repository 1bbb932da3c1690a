package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Backend is backend.Backend on host memory: the Kernels on buffers that
// are Go slices. The CPU backend serves Host without a copy; the emulated
// device (NewEmulated) runs the same kernels on memory it refuses to show
// the host, so every crossing goes through Upload/Download and is counted —
// the proof that nothing in a training step bypasses the backend, and the
// reference a device backend is compared against bit for bit.
type Backend struct {
	// Kernels are the reference kernels the backend runs.
	Kernels Kernels

	emulated                              bool
	ups, downs, upBytes, downBytes, syncs atomic.Int64
}

var _ backend.Backend = (*Backend)(nil)

// New returns the CPU backend using GOMAXPROCS workers.
func New() *Backend { return &Backend{} }

// shared is the process-wide CPU backend (Default).
var shared = New()

// Default returns the process-wide CPU backend: the one a model's initial
// weights are made on and trainer/device opens for "cpu", so that a model
// built on the host and a run on the cpu device share one backend (a model checks that
// its input is on its own) and one set of transfer counters.
func Default() *Backend { return shared }

// NewEmulated returns the emulated device: CPU kernels on memory whose Host
// view is unavailable.
func NewEmulated() *Backend { return &Backend{emulated: true} }

// Emulated reports whether be is the emulated device.
func (be *Backend) Emulated() bool { return be.emulated }

// Name reports "cpu" or "emu".
func (be *Backend) Name() string {
	if be.emulated {
		return "emu"
	}
	return "cpu"
}

// mem is one host allocation. Memory of the emulated device is marked so
// that the CPU backend refuses it and the other way round.
type mem struct {
	data     []float32
	emulated bool
	pooled   bool
	// zero marks fresh memory from make that no kernel has touched yet:
	// Fill(0) skips it, so zeroed outputs and first gradients do not pay a
	// pass over memory the runtime already cleared (and whose pages it has
	// not even faulted in).
	zero bool
}

func (m *mem) Elems() int { return len(m.data) }

// Exact-size pools: a model reuses the same few dozen tensor sizes every
// step, so most allocations are served by a buffer the previous step (or
// op) freed instead of fresh pages. sync.Pool lets the GC drop idle ones.
var memPools sync.Map // int -> *sync.Pool of *mem

func memPool(n int) *sync.Pool {
	if p, ok := memPools.Load(n); ok {
		return p.(*sync.Pool)
	}
	p, _ := memPools.LoadOrStore(n, &sync.Pool{})
	return p.(*sync.Pool)
}

// Alloc returns a pooled buffer of n elements with unspecified contents;
// built with the segpipe_poison tag they are NaN, so that a kernel relying
// on zeros it was not given fails its tests.
func (be *Backend) Alloc(n int) backend.Buffer {
	var m *mem
	if n > 0 {
		if p, ok := memPool(n).Get().(*mem); ok {
			m = p
		}
	}
	if m == nil {
		m = &mem{data: make([]float32, n), pooled: true, zero: !poison}
	} else {
		m.zero = false
	}
	m.emulated = be.emulated
	if poison {
		nan := float32(math.NaN())
		for i := range m.data {
			m.data[i] = nan
		}
	}
	return backend.Buffer{Mem: m, Len: n}
}

// Free pools whole buffers Alloc made; views and wrapped slices are left
// to the GC.
func (be *Backend) Free(b backend.Buffer) {
	m, ok := b.Mem.(*mem)
	if !ok || !m.pooled || b.Off != 0 || b.Len != len(m.data) || len(m.data) == 0 {
		return
	}
	memPool(len(m.data)).Put(m)
}

// Wrap returns host data as a CPU buffer without copying (the caller's
// slice becomes the buffer's memory).
func (be *Backend) Wrap(data []float32) backend.Buffer {
	if be.emulated {
		panic("cpu: the emulated device cannot wrap host memory; Upload it")
	}
	return backend.Buffer{Mem: &mem{data: data}, Len: len(data)}
}

// f resolves a buffer to its elements (nil for the zero Buffer).
func (be *Backend) f(b backend.Buffer) []float32 {
	if b.Mem == nil {
		return nil
	}
	m, ok := b.Mem.(*mem)
	if !ok || m.emulated != be.emulated {
		panic(fmt.Sprintf("cpu: %s backend given a buffer of another backend (%T)", be.Name(), b.Mem))
	}
	if m.zero {
		m.zero = false // whoever resolves it may write; shared memory stays read-only
	}
	return m.data[b.Off : b.Off+b.Len : b.Off+b.Len]
}

// i resolves a buffer of int32 elements.
func (be *Backend) i(b backend.Buffer) []int32 {
	return backend.Int32s(be.f(b))
}

// b resolves a buffer to its bytes.
func (be *Backend) b(buf backend.Buffer) []byte {
	return backend.Bytes(be.f(buf))
}

// Upload copies host values into dst.
func (be *Backend) Upload(dst backend.Buffer, src []float32) {
	if len(src) != dst.Len {
		panic(fmt.Sprintf("cpu: Upload of %d values into a buffer of %d", len(src), dst.Len))
	}
	be.ups.Add(1)
	be.upBytes.Add(int64(4 * len(src)))
	copy(be.f(dst), src)
}

// UploadBytes copies host bytes into dst's memory in order.
func (be *Backend) UploadBytes(dst backend.Buffer, src []byte) {
	if len(src) > 4*dst.Len {
		panic(fmt.Sprintf("cpu: UploadBytes of %d bytes into a buffer of %d elements", len(src), dst.Len))
	}
	be.ups.Add(1)
	be.upBytes.Add(int64(len(src)))
	copy(be.b(dst), src)
}

// Download copies src into host values.
func (be *Backend) Download(dst []float32, src backend.Buffer) {
	if len(dst) != src.Len {
		panic(fmt.Sprintf("cpu: Download of a buffer of %d into %d values", src.Len, len(dst)))
	}
	be.downs.Add(1)
	be.downBytes.Add(int64(4 * len(dst)))
	copy(dst, be.f(src))
}

// Host serves CPU memory as it is and refuses emulated memory.
func (be *Backend) Host(b backend.Buffer) []float32 {
	if be.emulated {
		return nil
	}
	return be.f(b)
}

// Sync is a no-op (kernels are synchronous) but is counted.
func (be *Backend) Sync() { be.syncs.Add(1) }

// Transfers reports the crossings since the backend was made.
func (be *Backend) Transfers() backend.Transfers {
	return backend.Transfers{Uploads: be.ups.Load(), Downloads: be.downs.Load(),
		UploadBytes: be.upBytes.Load(), DownloadBytes: be.downBytes.Load(), Syncs: be.syncs.Load()}
}

// The kernels, on resolved buffers.

func (be *Backend) Sgemm(g backend.Gemm, a, b, c backend.Buffer) {
	be.Kernels.Sgemm(g, be.f(a), be.f(b), be.f(c))
}
func (be *Backend) Conv2d(p backend.Conv, x, w, y backend.Buffer) {
	be.Kernels.Conv2d(p, be.f(x), be.f(w), be.f(y))
}
func (be *Backend) Conv2dBackwardData(p backend.Conv, dy, w, dx backend.Buffer) {
	be.Kernels.Conv2dBackwardData(p, be.f(dy), be.f(w), be.f(dx))
}
func (be *Backend) Conv2dBackwardDataWrite(p backend.Conv, dy, w, dx backend.Buffer) {
	be.Fill(dx, 0)
	be.Conv2dBackwardData(p, dy, w, dx)
}
func (be *Backend) Conv2dBackwardFilter(p backend.Conv, x, dy, dw backend.Buffer) {
	be.Kernels.Conv2dBackwardFilter(p, be.f(x), be.f(dy), be.f(dw))
}
func (be *Backend) BatchNormTrain(n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased backend.Buffer) {
	be.Kernels.BatchNormTrain(n, c, hw, eps, be.f(x), be.f(gamma), be.f(beta), be.f(y), be.f(mean), be.f(invstd), be.f(varUnbiased))
}
func (be *Backend) ChannelAffine(n, c, hw int, x, scale, shift, y backend.Buffer) {
	be.Kernels.ChannelAffine(n, c, hw, be.f(x), be.f(scale), be.f(shift), be.f(y))
}
func (be *Backend) ChannelSum(n, c, hw int, x, dst backend.Buffer) {
	be.Kernels.ChannelSum(n, c, hw, be.f(x), be.f(dst))
}
func (be *Backend) BatchNormBackward(n, c, hw int, x, dy, mean, invstd, gamma, dx, dgamma, dbeta backend.Buffer) {
	be.Kernels.BatchNormBackward(n, c, hw, be.f(x), be.f(dy), be.f(mean), be.f(invstd), be.f(gamma), be.f(dx), be.f(dgamma), be.f(dbeta))
}
func (be *Backend) BatchNormEval(n, c, hw int, eps float32, x, gamma, beta, mean, variance, y backend.Buffer) {
	be.Kernels.BatchNormEval(n, c, hw, eps, be.f(x), be.f(gamma), be.f(beta), be.f(mean), be.f(variance), be.f(y))
}
func (be *Backend) BatchNormEvalBackward(n, c, hw int, eps float32, x, dy, gamma, mean, variance, dx, dgamma, dbeta backend.Buffer) {
	be.Kernels.BatchNormEvalBackward(n, c, hw, eps, be.f(x), be.f(dy), be.f(gamma), be.f(mean), be.f(variance), be.f(dx), be.f(dgamma), be.f(dbeta))
}
func (be *Backend) MaxPool2d(p backend.Pool, x, y, arg backend.Buffer) {
	be.Kernels.MaxPool2d(p, be.f(x), be.f(y), be.i(arg))
}
func (be *Backend) MaxPool2dBackward(p backend.Pool, dy, arg, dx backend.Buffer) {
	be.Kernels.MaxPool2dBackward(p, be.f(dy), be.i(arg), be.f(dx))
}
func (be *Backend) UpsampleNearest(p backend.Upsample, x, y backend.Buffer) {
	be.Kernels.UpsampleNearest(p, be.f(x), be.f(y))
}
func (be *Backend) UpsampleNearestBackward(p backend.Upsample, dy, dx backend.Buffer) {
	be.Kernels.UpsampleNearestBackward(p, be.f(dy), be.f(dx))
}
func (be *Backend) Softmax(outer, n, inner int, x, y backend.Buffer) {
	be.Kernels.Softmax(outer, n, inner, be.f(x), be.f(y))
}
func (be *Backend) SoftmaxBackward(outer, n, inner int, y, dy, dx backend.Buffer) {
	be.Kernels.SoftmaxBackward(outer, n, inner, be.f(y), be.f(dy), be.f(dx))
}
func (be *Backend) Unary(f backend.Unary, x, y backend.Buffer) {
	be.Kernels.Unary(f, be.f(x), be.f(y))
}
func (be *Backend) UnaryBackward(f backend.Unary, x, y, dy, dx backend.Buffer) {
	be.Kernels.UnaryBackward(f, be.f(x), be.f(y), be.f(dy), be.f(dx))
}
func (be *Backend) Binary(f backend.Binary, s backend.Broadcast, a, b, y backend.Buffer) {
	be.Kernels.Binary(f, s, be.f(a), be.f(b), be.f(y))
}
func (be *Backend) BinaryBackward(f backend.Binary, s backend.Broadcast, a, b, dy, da, db backend.Buffer) {
	be.Kernels.BinaryBackward(f, s, be.f(a), be.f(b), be.f(dy), be.f(da), be.f(db))
}
func (be *Backend) Fill(x backend.Buffer, v float32) {
	if m, ok := x.Mem.(*mem); ok && v == 0 && m.zero && m.emulated == be.emulated {
		return // still as make left it
	}
	be.Kernels.Fill(be.f(x), v)
}
func (be *Backend) Axpby(alpha float32, x backend.Buffer, beta float32, y backend.Buffer) {
	be.Kernels.Axpby(alpha, be.f(x), beta, be.f(y))
}
func (be *Backend) BytesToFloat(scale float32, src, dst backend.Buffer) {
	be.Kernels.BytesToFloat(scale, be.b(src)[:dst.Len], be.f(dst))
}
func (be *Backend) Copy(s backend.Strided, src, dst backend.Buffer) {
	be.Kernels.Copy(s, be.f(src), be.f(dst))
}

var _ backend.HostKernels = (*Backend)(nil)

// RunHost runs f as one kernel on this backend's memory (see
// backend.HostKernels); on the emulated device it is the one way Go-coded
// fused kernels (loss, optimisers) read device memory, and it counts no
// transfer.
func (be *Backend) RunHost(f func(backend.View)) { f(hostView{be}) }

type hostView struct{ be *Backend }

func (v hostView) Float32(b backend.Buffer) []float32 { return v.be.f(b) }
func (v hostView) Int32(b backend.Buffer) []int32     { return v.be.i(b) }
func (v hostView) Bytes(b backend.Buffer) []byte      { return v.be.b(b) }
