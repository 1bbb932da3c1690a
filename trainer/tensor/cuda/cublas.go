package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

type cublasAPI struct {
	lib                                          *dylib
	create, destroy, setStream, setMathMode      uintptr
	getProperty, sgemmStridedBatched, setWorkspc uintptr
}

var (
	cublasOnce sync.Once
	cublasLib  *cublasAPI
	cublasErr  error
)

func loadCublas() (*cublasAPI, error) {
	cublasOnce.Do(func() {
		lib, err := openLibrary(libCUBLAS)
		if err != nil {
			cublasErr = err
			return
		}
		c := &cublasAPI{lib: lib}
		cublasErr = lib.bind(map[string]*uintptr{
			"cublasCreate_v2": &c.create, "cublasDestroy_v2": &c.destroy,
			"cublasSetStream_v2": &c.setStream, "cublasSetMathMode": &c.setMathMode,
			"cublasGetProperty": &c.getProperty, "cublasSgemmStridedBatched": &c.sgemmStridedBatched,
		})
		if cublasErr == nil {
			cublasLib = c
		}
	})
	return cublasLib, cublasErr
}

func (c *cublasAPI) check(call string, r uintptr) error {
	if code := int(int32(r)); code != 0 {
		return &status{Lib: "cublas", Call: call, Code: code, Name: cublasStatusName(code)}
	}
	return nil
}

// libraryVersion reads MAJOR, MINOR and PATCH through a
// xxxGetProperty(libraryPropertyType, int*) entry point.
func libraryVersion(fn uintptr) string {
	var v [3]int32
	for i := range v {
		if ccall(fn, uintptr(i), uintptr(unsafe.Pointer(&v[i]))) != 0 {
			return "unknown"
		}
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

// cublasVersion returns the cuBLAS version found and its path.
func cublasVersion() (version, path string, err error) {
	c, err := loadCublas()
	if err != nil {
		return "", "", err
	}
	return libraryVersion(c.getProperty), c.lib.path, nil
}

// blas is a cuBLAS handle bound to a device's compute stream. Use it
// inside Device.Do only, like the device's other calls; Device.Gemm does
// that.
type blas struct {
	api    *cublasAPI
	handle uintptr
}

// Math modes (cublasMath_t): default math keeps SGEMM's products in fp32
// (what PyTorch sets while torch.backends.cuda.matmul.allow_tf32 is
// False, its default); TF32 lets tensor cores round the inputs to 10-bit
// mantissas. Pedantic math, which also forbids reduced-precision
// reductions that SGEMM does not use, is not needed for fp32 parity.
const (
	cublasDefaultMath = 0
	cublasTF32Math    = 3
)

// NewBlas creates a cuBLAS handle on d's compute stream: CUBLAS_DEFAULT_MATH
// (fp32) unless tf32.
func (d *device) NewBlas(tf32 bool) (*blas, error) {
	api, err := loadCublas()
	if err != nil {
		return nil, err
	}
	b := &blas{api: api}
	err = d.Do(func() error {
		if err := api.check("cublasCreate", ccall(api.create, uintptr(unsafe.Pointer(&b.handle)))); err != nil {
			return err
		}
		if err := api.check("cublasSetStream", ccall(api.setStream, b.handle, uintptr(d.stream))); err != nil {
			return err
		}
		mode := uintptr(cublasDefaultMath)
		if tf32 {
			mode = cublasTF32Math
		}
		return api.check("cublasSetMathMode", ccall(api.setMathMode, b.handle, mode))
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Close destroys the handle.
func (b *blas) Close(d *device) error {
	return d.Do(func() error { return b.api.check("cublasDestroy", ccall(b.api.destroy, b.handle)) })
}

// Gemm queues the row-major product g on the device's compute stream; a,
// b and c are device buffers laid out as g describes.
func (d *device) Gemm(bl *blas, g backend.Gemm, a, b, c devptr) error {
	cm, err := toColMajor(g)
	if err != nil {
		return err
	}
	if cm.m == 0 || cm.n == 0 {
		return nil
	}
	return d.Do(func() error { return sgemm(bl, cm, g.Alpha, g.Beta, a, b, c) })
}

// gemmLocked is Gemm inside a Do already held.
func (d *device) gemmLocked(bl *blas, g backend.Gemm, a, b, c devptr) error {
	cm, err := toColMajor(g)
	if err != nil {
		return err
	}
	if cm.m == 0 || cm.n == 0 {
		return nil
	}
	return sgemm(bl, cm, g.Alpha, g.Beta, a, b, c)
}

func sgemm(bl *blas, cm colMajorGemm, alpha, beta float32, a, b, c devptr) error {
	ops := [2]devptr{a, b}
	op := func(t bool) uintptr {
		if t {
			return 1 // CUBLAS_OP_T
		}
		return 0
	}
	return bl.api.check("cublasSgemmStridedBatched", ccall(bl.api.sgemmStridedBatched, bl.handle,
		op(cm.transA), op(cm.transB), uintptr(cm.m), uintptr(cm.n), uintptr(cm.k),
		uintptr(unsafe.Pointer(&alpha)), uintptr(ops[cm.a]), uintptr(cm.lda), uintptr(int64(cm.strideA)),
		uintptr(ops[cm.b]), uintptr(cm.ldb), uintptr(int64(cm.strideB)),
		uintptr(unsafe.Pointer(&beta)), uintptr(c), uintptr(cm.ldc), uintptr(int64(cm.strid)),
		uintptr(cm.batch)))
}
