package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// stagingBytes is the pinned block every synchronous crossing goes
// through, in pieces of at most this size: copies from pinned memory run
// at full bus speed and leave Go memory out of the driver's hands.
const stagingBytes = 4 << 20

// gpuEngine is the engine of a real GPU: a Device with its cuBLAS and
// cuDNN handles and the pinned staging block.
type gpuEngine struct {
	*device
	blas  *blas
	dnn   *dnn
	stage *hostBuffer
	plans []*convPlan

	// cache keeps freed allocations by size for the next request of that
	// size (sizes holds every live or cached allocation's): a step frees
	// and allocates the same sizes over and over, and a cache hit here
	// costs no call into the driver, where the pool's own hit costs two
	// (cuMemFreeAsync, cuMemAllocAsync), a thousand times a step. Reuse is
	// in stream order as the pool's is: every user of these buffers queues
	// on the compute stream.
	cacheMu sync.Mutex
	cache   map[int][]devptr
	sizes   map[devptr]int
}

func newGPUEngine(d *device, opt Options) (*gpuEngine, error) {
	if _, err := d.Kernels(); err != nil {
		return nil, err
	}
	e := &gpuEngine{device: d, cache: map[int][]devptr{}, sizes: map[devptr]int{}}
	// A convolution's workspace that does not fit first takes back what
	// the cache holds.
	d.reclaim = func() error { return e.freeLocked(e.takeCache()) }
	bl, err := loadCublas()
	if err != nil {
		return nil, err
	}
	dn, err := loadCudnn()
	if err != nil {
		return nil, err
	}
	if err := checkMajors(d.drv, bl, dn); err != nil {
		return nil, err
	}
	if e.blas, err = d.NewBlas(opt.TF32); err != nil {
		return nil, err
	}
	if e.dnn, err = d.NewDnn(opt.TF32 || opt.ConvTF32); err != nil {
		e.blas.Close(d)
		return nil, err
	}
	if e.stage, err = d.AllocHost(stagingBytes); err != nil {
		e.dnn.Close(d)
		e.blas.Close(d)
		return nil, err
	}
	return e, nil
}

// The cache's lock is never held across a device call and is taken
// inside Do (by the workspace's reclaim hook): the order is always the
// device's mutex, then the cache's.
func (e *gpuEngine) alloc(bytes int) (devptr, error) {
	bytes = max(bytes, 1)
	e.cacheMu.Lock()
	if l := e.cache[bytes]; len(l) > 0 {
		p := l[len(l)-1]
		e.cache[bytes] = l[:len(l)-1]
		e.cacheMu.Unlock()
		return p, nil
	}
	e.cacheMu.Unlock()
	p, err := e.Alloc(bytes)
	if err != nil {
		// Memory cached here is the pool's to hand out in other sizes.
		if ferr := e.dropCache(); ferr != nil {
			return 0, errors.Join(err, ferr)
		}
		if p, err = e.Alloc(bytes); err != nil {
			return 0, err
		}
	}
	e.cacheMu.Lock()
	e.sizes[p] = bytes
	e.cacheMu.Unlock()
	return p, nil
}

func (e *gpuEngine) free(p devptr) error {
	e.cacheMu.Lock()
	defer e.cacheMu.Unlock()
	n, ok := e.sizes[p]
	if !ok {
		return fmt.Errorf("cuda: free of %#x, which this engine did not allocate", uintptr(p))
	}
	e.cache[n] = append(e.cache[n], p)
	return nil
}

// takeCache empties the cache and returns what it held, forgotten.
func (e *gpuEngine) takeCache() []devptr {
	e.cacheMu.Lock()
	defer e.cacheMu.Unlock()
	var out []devptr
	for n, l := range e.cache {
		for _, p := range l {
			delete(e.sizes, p)
		}
		out = append(out, l...)
		delete(e.cache, n)
	}
	return out
}

// dropCache returns every cached allocation to the pool.
func (e *gpuEngine) dropCache() error {
	return e.Do(func() error { return e.freeLocked(e.takeCache()) })
}

// freeLocked returns ps to the pool inside Do.
func (e *gpuEngine) freeLocked(ps []devptr) error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, e.drv.check("cuMemFreeAsync", ccall(e.drv.cuMemFreeAsync, uintptr(p), uintptr(e.stream))))
	}
	return errors.Join(errs...)
}
func (e *gpuEngine) sync() error { return e.Sync() }

func (e *gpuEngine) gemm(g backend.Gemm, a, b, c devptr) error { return e.Gemm(e.blas, g, a, b, c) }

// lockedMatmul queues GEMMs inside a Do that is already held.
type lockedMatmul struct{ e *gpuEngine }

func (m lockedMatmul) Gemm(g backend.Gemm, a, b, c devptr) error {
	return m.e.gemmLocked(m.e.blas, g, a, b, c)
}

func (e *gpuEngine) hold(f func(l launcher, mm matmul) error) error {
	return e.Do(func() error { return f(onThread{e.device}, lockedMatmul{e}) })
}

// upload copies src through the staging block on the compute stream, in
// stream order after the kernels already queued (which may still read
// dst's old contents), and waits for each piece before refilling the block.
func (e *gpuEngine) upload(dst devptr, src []byte) error {
	d := e.device
	return d.Do(func() error {
		buf := e.stage.Bytes()
		for len(src) > 0 {
			n := copy(buf, src)
			if err := d.drv.check("cuMemcpyHtoDAsync", ccall(d.drv.cuMemcpyHtoDAsync, uintptr(dst), e.stage.addr, uintptr(n), uintptr(d.stream))); err != nil {
				return err
			}
			if err := d.syncLocked(); err != nil {
				return err
			}
			src, dst = src[n:], dst.Add(n)
		}
		return nil
	})
}

// download copies src into dst through the staging block after the
// compute stream's prior work.
func (e *gpuEngine) download(dst []byte, src devptr) error {
	d := e.device
	return d.Do(func() error {
		buf := e.stage.Bytes()
		for len(dst) > 0 {
			n := min(len(dst), len(buf))
			if err := d.drv.check("cuMemcpyDtoHAsync", ccall(d.drv.cuMemcpyDtoHAsync, e.stage.addr, uintptr(src), uintptr(n), uintptr(d.stream))); err != nil {
				return err
			}
			if err := d.syncLocked(); err != nil {
				return err
			}
			copy(dst, buf[:n])
			dst, src = dst[n:], src.Add(n)
		}
		return nil
	})
}

func (e *gpuEngine) planConv(c convShape) (*convPlan, error) {
	p, err := e.PlanConv(e.dnn, c)
	if err == nil {
		e.plans = append(e.plans, p)
	}
	return p, err
}

func (e *gpuEngine) convForward(p *convPlan, x, w, y devptr) error {
	return e.ConvForward(e.dnn, p, x, w, y)
}

func (e *gpuEngine) convBackwardData(p *convPlan, dy, w, dx devptr, accumulate bool) error {
	return e.ConvBackwardData(e.dnn, p, dy, w, dx, accumulate)
}

func (e *gpuEngine) convBackwardFilter(p *convPlan, x, dy, dw devptr) error {
	return e.ConvBackwardFilter(e.dnn, p, x, dy, dw)
}

func (e *gpuEngine) stageQueue() (stageQueue, error) { return newDeviceQueue(e.device) }

func (e *gpuEngine) close() error {
	errs := []error{e.Sync()}
	for _, p := range e.plans {
		p.Close(e.device, e.dnn)
	}
	e.plans = nil
	errs = append(errs, e.stage.Free(), e.dnn.Close(e.device), e.blas.Close(e.device), e.device.Close())
	return errors.Join(errs...)
}

var _ engine = (*gpuEngine)(nil)
