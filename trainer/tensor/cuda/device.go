package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// stream is a CUDA stream handle (CUstream); 0 is the legacy default stream.
type stream uintptr

// event is a CUDA event handle (CUevent).
type event uintptr

// device owns one GPU's primary context.
//
// CUDA makes a context current per OS thread while goroutines migrate
// between threads, so every driver, cuBLAS and cuDNN call of a Device runs
// inside Do, which locks the calling goroutine to its thread for the call,
// makes the context current there when it is not, and holds the Device's
// mutex: calls are made directly by the goroutine that issues them, with
// no hand-off to another thread and no wait for one, and a Device is safe
// for concurrent use (calls are serialised).
type device struct {
	GPU
	drv *driver

	ctx    uintptr
	stream stream // the compute stream every launch and copy uses by default

	// args is pinned host memory for kernel argument blocks: the driver
	// reads raw addresses from it, which Go memory must not hold.
	args     uintptr
	argBytes []byte

	kernelsOnce sync.Once
	kernelsErr  error
	modules     []uintptr
	moduleNames []string // modules[i] is kernels/<moduleNames[i]>.ptx, or a declared Module's
	// functions[k] is kernel k's handle: this package's own resolved when
	// the modules load, another package's at its first launch.
	functions []uintptr

	// ws is the convolutions' workspace (see withWorkspace).
	ws      devptr
	wsBytes uint64
	// reclaim, when set, returns memory held above the pool to it (inside
	// Do): withWorkspace calls it when the pool cannot serve a workspace.
	reclaim func() error

	// mu serialises the calls (and guards argBytes, which every launch
	// packs); closed refuses calls after Close.
	mu     sync.Mutex
	closed bool
}

// open retains the primary context of GPU ordinal, creates a
// non-blocking compute stream, raises the release threshold of the
// device's default memory pool so that memory freed with Free stays cached
// in the pool (the driver's own caching allocator), and allocates the
// pinned argument block.
func open(ordinal int) (*device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	g, err := drv.gpu(ordinal)
	if err != nil {
		return nil, fmt.Errorf("gpu %d: %w", ordinal, err)
	}
	if !g.MemoryPools {
		return nil, fmt.Errorf("%w: gpu %d (%s) lacks stream-ordered allocation (memory pools)", ErrUnavailable, ordinal, g.Name)
	}
	d := &device{GPU: g, drv: drv}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.setup(); err != nil {
		d.teardown()
		return nil, fmt.Errorf("gpu %d (%s): %w", ordinal, g.Name, err)
	}
	return d, nil
}

func (d *device) setup() error {
	drv := d.drv
	var dev int32
	if err := drv.check("cuDeviceGet", ccall(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.Ordinal))); err != nil {
		return err
	}
	if err := drv.check("cuDevicePrimaryCtxRetain", ccall(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(dev))); err != nil {
		return err
	}
	if err := drv.check("cuCtxSetCurrent", ccall(drv.cuCtxSetCurrent, d.ctx)); err != nil {
		return err
	}
	const streamNonBlocking = 1
	if err := drv.check("cuStreamCreate", ccall(drv.cuStreamCreate, uintptr(unsafe.Pointer(&d.stream)), streamNonBlocking)); err != nil {
		return err
	}
	var pool uintptr
	if err := drv.check("cuDeviceGetDefaultMemPool", ccall(drv.cuDeviceGetDefaultMemPool, uintptr(unsafe.Pointer(&pool)), uintptr(dev))); err != nil {
		return err
	}
	threshold := ^uint64(0) // keep everything freed cached; trimmed only at exit
	if err := drv.check("cuMemPoolSetAttribute", ccall(drv.cuMemPoolSetAttribute, pool, memPoolReleaseThresh, uintptr(unsafe.Pointer(&threshold)))); err != nil {
		return err
	}
	if err := drv.check("cuMemHostAlloc", ccall(drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&d.args)), maxArgBytes, 0)); err != nil {
		return err
	}
	d.argBytes = unsafe.Slice(*(**byte)(unsafe.Pointer(&d.args)), maxArgBytes)
	return nil
}

func (d *device) teardown() {
	drv := d.drv
	if d.stream != 0 {
		ccall(drv.cuStreamSynchronize, uintptr(d.stream))
		ccall(drv.cuStreamDestroy, uintptr(d.stream))
		d.stream = 0
	}
	for _, m := range d.modules {
		ccall(drv.cuModuleUnload, m)
	}
	d.modules = nil
	if d.args != 0 {
		ccall(drv.cuMemFreeHost, d.args)
		d.args, d.argBytes = 0, nil
	}
	if d.ctx != 0 {
		var dev int32
		ccall(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.Ordinal))
		ccall(drv.cuDevicePrimaryCtxRelease, uintptr(dev))
		d.ctx = 0
	}
}

var errClosed = errors.New("cuda: device closed")

// Do runs f on the calling goroutine with its OS thread locked and the
// device's context current on that thread, holding the device's mutex,
// and returns f's error. f must not call Do itself.
//
// The context check is one cuCtxGetCurrent (a thread-local read in the
// driver) and, only when another context or none is current on this
// thread, one cuCtxSetCurrent: cheaper than any way of asking the
// operating system which thread this is.
func (d *device) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	if err := d.makeCurrent(); err != nil {
		return err
	}
	return f()
}

// makeCurrent makes d's context current on the locked calling thread.
func (d *device) makeCurrent() error {
	var cur uintptr
	if err := d.drv.check("cuCtxGetCurrent", ccall(d.drv.cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur)))); err != nil {
		return err
	}
	if cur == d.ctx {
		return nil
	}
	return d.drv.check("cuCtxSetCurrent", ccall(d.drv.cuCtxSetCurrent, d.ctx))
}

// Close waits for the compute stream and releases the context. Buffers
// not freed are released with it; calls after Close fail.
func (d *device) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.makeCurrent()
	if err == nil {
		err = d.syncLocked()
	}
	d.teardown()
	return err
}

// Stream returns the device's compute stream.
func (d *device) Stream() stream { return d.stream }

// Alloc returns bytes of device memory from the default pool, ordered on
// the compute stream (usable by work submitted after it on that stream).
func (d *device) Alloc(bytes int) (devptr, error) {
	var p devptr
	err := d.Do(func() error {
		return d.drv.check("cuMemAllocAsync", ccall(d.drv.cuMemAllocAsync, uintptr(unsafe.Pointer(&p)), uintptr(max(bytes, 1)), uintptr(d.stream)))
	})
	return p, err
}

// Free returns p to the pool once the compute stream's prior work is done.
func (d *device) Free(p devptr) error {
	return d.Do(func() error {
		return d.drv.check("cuMemFreeAsync", ccall(d.drv.cuMemFreeAsync, uintptr(p), uintptr(d.stream)))
	})
}

// Upload copies src to dst and waits for the copy: src is Go memory, which
// must not be read by the device after this returns.
func (d *device) Upload(dst devptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.Do(func() error {
		if err := d.drv.check("cuMemcpyHtoDAsync", ccall(d.drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(d.stream))); err != nil {
			return err
		}
		return d.syncLocked()
	})
}

// Download copies len(dst) bytes from src into dst after the compute
// stream's prior work, and waits for them.
func (d *device) Download(dst []byte, src devptr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.Do(func() error {
		if err := d.drv.check("cuMemcpyDtoHAsync", ccall(d.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), uintptr(d.stream))); err != nil {
			return err
		}
		return d.syncLocked()
	})
}

// UploadAsync queues a copy of the pinned host buffer src to dst on
// stream s; src must stay untouched until the stream passes the copy
// (record an Event after it).
func (d *device) UploadAsync(s stream, dst devptr, src *hostBuffer) error {
	return d.Do(func() error {
		return d.drv.check("cuMemcpyHtoDAsync", ccall(d.drv.cuMemcpyHtoDAsync, uintptr(dst), src.addr, uintptr(src.n), uintptr(s)))
	})
}

// CopyAsync queues a device-to-device copy of n bytes on the compute stream.
func (d *device) CopyAsync(dst, src devptr, n int) error {
	return d.Do(func() error {
		return d.drv.check("cuMemcpyDtoDAsync", ccall(d.drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(d.stream)))
	})
}

// Memset32 queues filling n 32-bit words at p with v on the compute stream.
func (d *device) Memset32(p devptr, v uint32, n int) error {
	return d.Do(func() error {
		return d.drv.check("cuMemsetD32Async", ccall(d.drv.cuMemsetD32Async, uintptr(p), uintptr(v), uintptr(n), uintptr(d.stream)))
	})
}

// Sync waits for all work queued on the compute stream.
func (d *device) Sync() error { return d.Do(d.syncLocked) }

func (d *device) syncLocked() error {
	return d.drv.check("cuStreamSynchronize", ccall(d.drv.cuStreamSynchronize, uintptr(d.stream)))
}

// NewStream creates a non-blocking stream (a copy stream beside the
// compute stream, say).
func (d *device) NewStream() (stream, error) {
	var s stream
	err := d.Do(func() error {
		return d.drv.check("cuStreamCreate", ccall(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&s)), 1))
	})
	return s, err
}

// DestroyStream destroys s once its work is done.
func (d *device) DestroyStream(s stream) error {
	return d.Do(func() error { return d.drv.check("cuStreamDestroy", ccall(d.drv.cuStreamDestroy, uintptr(s))) })
}

// NewEvent creates an event; timing makes it usable with Elapsed.
func (d *device) NewEvent(timing bool) (event, error) {
	var e event
	flags := uintptr(2) // CU_EVENT_DISABLE_TIMING
	if timing {
		flags = 0
	}
	err := d.Do(func() error {
		return d.drv.check("cuEventCreate", ccall(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&e)), flags))
	})
	return e, err
}

// Record marks e at the current end of stream s.
func (d *device) Record(e event, s stream) error {
	return d.Do(func() error { return d.drv.check("cuEventRecord", ccall(d.drv.cuEventRecord, uintptr(e), uintptr(s))) })
}

// Wait makes future work on stream s wait for e (no host wait).
func (d *device) Wait(s stream, e event) error {
	return d.Do(func() error {
		return d.drv.check("cuStreamWaitEvent", ccall(d.drv.cuStreamWaitEvent, uintptr(s), uintptr(e), 0))
	})
}

// SyncEvent blocks until e has completed.
func (d *device) SyncEvent(e event) error {
	return d.Do(func() error { return d.drv.check("cuEventSynchronize", ccall(d.drv.cuEventSynchronize, uintptr(e))) })
}

// Elapsed returns the milliseconds between two completed timing events.
func (d *device) Elapsed(start, end event) (float32, error) {
	var ms float32
	err := d.Do(func() error {
		return d.drv.check("cuEventElapsedTime", ccall(d.drv.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)))
	})
	return ms, err
}

// DestroyEvent destroys e.
func (d *device) DestroyEvent(e event) error {
	return d.Do(func() error { return d.drv.check("cuEventDestroy", ccall(d.drv.cuEventDestroy, uintptr(e))) })
}

// hostBuffer is pinned (page-locked) host memory: copies from it run
// asynchronously at full bus speed. Its bytes are C memory.
type hostBuffer struct {
	d    *device
	addr uintptr
	n    int
}

// AllocHost allocates n bytes of pinned host memory.
func (d *device) AllocHost(n int) (*hostBuffer, error) {
	h := &hostBuffer{d: d, n: n}
	err := d.Do(func() error {
		return d.drv.check("cuMemHostAlloc", ccall(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&h.addr)), uintptr(max(n, 1)), 0))
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Bytes returns the buffer's memory; it is invalid after Free.
func (h *hostBuffer) Bytes() []byte {
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&h.addr)), h.n)
}

// Free releases the pinned memory.
func (h *hostBuffer) Free() error {
	if h.addr == 0 {
		return nil
	}
	err := h.d.Do(func() error { return h.d.drv.check("cuMemFreeHost", ccall(h.d.drv.cuMemFreeHost, h.addr)) })
	h.addr = 0
	return err
}
