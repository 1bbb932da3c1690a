package cuda

import (
	"errors"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// stagingBytes is the pinned block every synchronous crossing goes
// through, in pieces of at most this size: copies from pinned memory run
// at full bus speed and leave Go memory out of the driver's hands.
const stagingBytes = 4 << 20

// gpuEngine is the engine of a real GPU: a Device with its cuBLAS and
// cuDNN handles and the pinned staging block.
type gpuEngine struct {
	*Device
	blas  *Blas
	dnn   *Dnn
	stage *HostBuffer
	plans []*ConvPlan
}

func newGPUEngine(d *Device, opt Options) (*gpuEngine, error) {
	if _, err := d.Kernels(); err != nil {
		return nil, err
	}
	e := &gpuEngine{Device: d}
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
	if e.blas, err = d.NewBlas(opt.GemmTF32); err != nil {
		return nil, err
	}
	if e.dnn, err = d.NewDnn(opt.TF32); err != nil {
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

func (e *gpuEngine) alloc(bytes int) (Ptr, error) { return e.Alloc(bytes) }
func (e *gpuEngine) free(p Ptr) error             { return e.Free(p) }
func (e *gpuEngine) sync() error                  { return e.Sync() }

func (e *gpuEngine) gemm(g backend.Gemm, a, b, c Ptr) error { return e.Gemm(e.blas, g, a, b, c) }

// lockedMatmul queues GEMMs inside a Do that is already held.
type lockedMatmul struct{ e *gpuEngine }

func (m lockedMatmul) Gemm(g backend.Gemm, a, b, c Ptr) error {
	return m.e.gemmLocked(m.e.blas, g, a, b, c)
}

func (e *gpuEngine) hold(f func(l launcher, mm Matmul) error) error {
	return e.Do(func() error { return f(onThread{e.Device}, lockedMatmul{e}) })
}

// upload copies src through the staging block on the compute stream, in
// stream order after the kernels already queued (which may still read
// dst's old contents), and waits for each piece before refilling the block.
func (e *gpuEngine) upload(dst Ptr, src []byte) error {
	d := e.Device
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
func (e *gpuEngine) download(dst []byte, src Ptr) error {
	d := e.Device
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

func (e *gpuEngine) planConv(c Conv) (*ConvPlan, error) {
	p, err := e.PlanConv(e.dnn, c)
	if err == nil {
		e.plans = append(e.plans, p)
	}
	return p, err
}

func (e *gpuEngine) convForward(p *ConvPlan, x, w, y Ptr) error {
	return e.ConvForward(e.dnn, p, x, w, y)
}

func (e *gpuEngine) convBackwardData(p *ConvPlan, dy, w, dx Ptr) error {
	return e.ConvBackwardData(e.dnn, p, dy, w, dx)
}

func (e *gpuEngine) convBackwardFilter(p *ConvPlan, x, dy, dw Ptr) error {
	return e.ConvBackwardFilter(e.dnn, p, x, dy, dw)
}

func (e *gpuEngine) stageQueue() (stageQueue, error) { return newDeviceQueue(e.Device) }

func (e *gpuEngine) close() error {
	errs := []error{e.Sync()}
	for _, p := range e.plans {
		p.Close(e.Device, e.dnn)
	}
	e.plans = nil
	errs = append(errs, e.stage.Free(), e.dnn.Close(e.Device), e.blas.Close(e.Device), e.Device.Close())
	return errors.Join(errs...)
}

var _ engine = (*gpuEngine)(nil)
