package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// driver holds the CUDA driver API entry points. Names with a _v2 suffix
// are what cuda.h #defines the plain names to; the driver keeps exporting
// them for binaries built against older headers, so one table serves
// drivers from CUDA 11.2 (stream-ordered allocation) to 13.
type driver struct {
	lib *dylib

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName               uintptr
	cuDeviceGetAttribute, cuDeviceTotalMem                       uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease          uintptr
	cuCtxSetCurrent, cuCtxGetCurrent, cuCtxSynchronize           uintptr
	cuMemGetInfo                                                 uintptr
	cuModuleLoadDataEx, cuModuleUnload, cuModuleGetFunction      uintptr
	cuLaunchKernel                                               uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize         uintptr
	cuStreamWaitEvent                                            uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord                 uintptr
	cuEventSynchronize, cuEventElapsedTime                       uintptr
	cuDeviceGetDefaultMemPool, cuMemPoolSetAttribute             uintptr
	cuMemAllocAsync, cuMemFreeAsync                              uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync      uintptr
	cuMemsetD8Async, cuMemsetD32Async                            uintptr
	cuMemHostAlloc, cuMemFreeHost                                uintptr
}

var (
	driverOnce sync.Once
	driverAPI  *driver
	driverErr  error
)

// loadDriver opens libcuda.so.1 and calls cuInit once per process.
func loadDriver() (*driver, error) {
	driverOnce.Do(func() { driverAPI, driverErr = openDriver() })
	return driverAPI, driverErr
}

func openDriver() (*driver, error) {
	lib, err := openLibrary(libCUDA)
	if err != nil {
		return nil, err
	}
	d := &driver{lib: lib}
	err = lib.bind(map[string]*uintptr{
		"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion,
		"cuGetErrorName": &d.cuGetErrorName, "cuGetErrorString": &d.cuGetErrorString,
		"cuDeviceGetCount": &d.cuDeviceGetCount, "cuDeviceGet": &d.cuDeviceGet,
		"cuDeviceGetName": &d.cuDeviceGetName, "cuDeviceGetAttribute": &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":      &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent": &d.cuCtxSetCurrent, "cuCtxGetCurrent": &d.cuCtxGetCurrent, "cuCtxSynchronize": &d.cuCtxSynchronize,
		"cuMemGetInfo_v2":    &d.cuMemGetInfo,
		"cuModuleLoadDataEx": &d.cuModuleLoadDataEx, "cuModuleUnload": &d.cuModuleUnload,
		"cuModuleGetFunction": &d.cuModuleGetFunction, "cuLaunchKernel": &d.cuLaunchKernel,
		"cuStreamCreate": &d.cuStreamCreate, "cuStreamDestroy_v2": &d.cuStreamDestroy,
		"cuStreamSynchronize": &d.cuStreamSynchronize, "cuStreamWaitEvent": &d.cuStreamWaitEvent,
		"cuEventCreate": &d.cuEventCreate, "cuEventDestroy_v2": &d.cuEventDestroy,
		"cuEventRecord": &d.cuEventRecord, "cuEventSynchronize": &d.cuEventSynchronize,
		"cuEventElapsedTime":        &d.cuEventElapsedTime,
		"cuDeviceGetDefaultMemPool": &d.cuDeviceGetDefaultMemPool, "cuMemPoolSetAttribute": &d.cuMemPoolSetAttribute,
		"cuMemAllocAsync": &d.cuMemAllocAsync, "cuMemFreeAsync": &d.cuMemFreeAsync,
		"cuMemcpyHtoDAsync_v2": &d.cuMemcpyHtoDAsync, "cuMemcpyDtoHAsync_v2": &d.cuMemcpyDtoHAsync,
		"cuMemcpyDtoDAsync_v2": &d.cuMemcpyDtoDAsync,
		"cuMemsetD8Async":      &d.cuMemsetD8Async, "cuMemsetD32Async": &d.cuMemsetD32Async,
		"cuMemHostAlloc": &d.cuMemHostAlloc, "cuMemFreeHost": &d.cuMemFreeHost,
	})
	if err != nil {
		return nil, err
	}
	if err := d.check("cuInit", ccall(d.cuInit, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", lib.path, err)
	}
	return d, nil
}

// check turns a CUresult into nil or a *Status with the driver's own
// description.
func (d *driver) check(call string, r uintptr) error {
	code := int(int32(r))
	if code == 0 {
		return nil
	}
	var s uintptr
	if d.cuGetErrorString != 0 {
		ccall(d.cuGetErrorString, r, uintptr(unsafe.Pointer(&s)))
	}
	return &status{Lib: "cuda", Call: call, Code: code, Name: driverErrorName(code), Detail: goString(s)}
}

// driverVersion returns the driver's CUDA version (13000 is 13.0) and the
// path libcuda was loaded from.
func driverVersion() (version int, path string, err error) {
	d, err := loadDriver()
	if err != nil {
		return 0, "", err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", ccall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return 0, d.lib.path, err
	}
	return int(v), d.lib.path, nil
}

// versionString formats a CUDA version number (12080) as "12.8".
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Device attributes read by Info (CUdevice_attribute).
const (
	attrMultiprocessors   = 16
	attrPCIBusID          = 33
	attrComputeMajor      = 75
	attrComputeMinor      = 76
	attrMemoryPools       = 115
	attrMaxThreadsPerBlk  = 1
	memPoolReleaseThresh  = 4 // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
	jitInfoLogBuffer      = 3
	jitInfoLogBufferSize  = 4
	jitErrorLogBuffer     = 5
	jitErrorLogBufferSize = 6
	jitLogVerbose         = 12
)

// GPU describes one device as the driver reports it.
type GPU struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	Memory       uint64
	SMs          int
	PCIBus       int
	MemoryPools  bool // stream-ordered allocation supported
}

// gpus lists the devices the driver sees. With no driver, or a driver and
// no device, the error wraps ErrUnavailable.
func gpus() ([]GPU, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var n int32
	if err := d.check("cuDeviceGetCount", ccall(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the CUDA driver (%s) sees no GPU", ErrUnavailable, d.lib.path)
	}
	out := make([]GPU, n)
	for i := range out {
		g, err := d.gpu(i)
		if err != nil {
			return nil, fmt.Errorf("gpu %d: %w", i, err)
		}
		out[i] = g
	}
	return out, nil
}

func (d *driver) gpu(ordinal int) (GPU, error) {
	g := GPU{Ordinal: ordinal}
	var dev int32
	if err := d.check("cuDeviceGet", ccall(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))); err != nil {
		return g, err
	}
	var name [256]byte
	if err := d.check("cuDeviceGetName", ccall(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)-1), uintptr(dev))); err != nil {
		return g, err
	}
	for i, b := range name {
		if b == 0 {
			g.Name = string(name[:i])
			break
		}
	}
	attr := func(a int) (int, error) {
		var v int32
		err := d.check("cuDeviceGetAttribute", ccall(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev)))
		return int(v), err
	}
	var err error
	var pools int
	for _, a := range []struct {
		id  int
		dst *int
	}{{attrComputeMajor, &g.Major}, {attrComputeMinor, &g.Minor}, {attrMultiprocessors, &g.SMs}, {attrPCIBusID, &g.PCIBus}, {attrMemoryPools, &pools}} {
		if *a.dst, err = attr(a.id); err != nil {
			return g, err
		}
	}
	g.MemoryPools = pools != 0
	var mem uint64
	if err := d.check("cuDeviceTotalMem", ccall(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&mem)), uintptr(dev))); err != nil {
		return g, err
	}
	g.Memory = mem
	return g, nil
}
