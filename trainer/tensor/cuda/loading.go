package cuda

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

var (
	nvrtcOnce sync.Once
	nvrtcPath string
)

// preloadNVRTC loads NVRTC (and its builtins beside it) with RTLD_GLOBAL,
// of cuBLAS's CUDA major when cuBLAS loads, so that cuDNN's
// runtime-compiled engines, which open it by soname, find the one that
// goes with the other libraries even where it is in a wheel folder the
// dynamic loader does not search. It is optional: without it cuDNN uses
// its precompiled engines only.
func preloadNVRTC() {
	nvrtcOnce.Do(func() {
		want := ""
		if c, err := loadCublas(); err == nil {
			if m := cublasMajor(c); m > 0 {
				want = fmt.Sprintf(".so.%d", m)
			}
		}
		env := processEnv()
		for _, p := range libNVRTC.candidates(env) {
			if want != "" && !strings.HasSuffix(p, want) {
				continue
			}
			if filepath.IsAbs(p) {
				major := p[strings.LastIndex(p, ".so")+len(".so"):]
				builtins, _ := env.glob(filepath.Join(filepath.Dir(p), "libnvrtc-builtins.so"+major+"*"))
				for _, b := range builtins {
					_, _ = dlopen(b) // NVRTC's own load reports a builtins problem
				}
			}
			if _, err := dlopen(p); err == nil {
				nvrtcPath = p
				return
			}
		}
	})
}

// nvrtcPathFor returns where NVRTC was preloaded from, or "" when it was not
// found (cuDNN then runs its precompiled engines only).
func nvrtcPathFor() string {
	preloadNVRTC()
	return nvrtcPath
}

// cublasMajor is cuBLAS's major version (cublasGetProperty MAJOR_VERSION),
// 0 when unknown.
func cublasMajor(c *cublasAPI) int {
	var v int32
	if ccall(c.getProperty, 0, uintptr(unsafe.Pointer(&v))) != 0 {
		return 0
	}
	return int(v)
}

// checkMajors refuses libraries of different CUDA majors (cuBLAS 13 beside
// a cuDNN built for CUDA 12 loads, then fails in the middle of a step) and
// a driver older than the libraries' CUDA, with a message that says which
// library came from where and how to choose.
func checkMajors(drv *driver, bl *cublasAPI, dn *cudnnAPI) error {
	cb := cublasMajor(bl)
	var dv int32
	if err := drv.check("cuDriverGetVersion", ccall(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&dv)))); err != nil {
		return err
	}
	if cb > 0 && int(dv)/1000 < cb {
		return fmt.Errorf("%w: the CUDA driver at %s supports CUDA %s, older than cuBLAS %d at %s: update the driver or use CUDA %d's libraries (SEGPIPE_LIBCUBLAS, SEGPIPE_LIBCUDNN, LD_LIBRARY_PATH)",
			ErrUnavailable, drv.lib.path, versionString(int(dv)), cb, bl.lib.path, int(dv)/1000)
	}
	if dn.getCudartVersion == 0 || cb == 0 {
		return nil // an older cuDNN cannot say; the libraries' own checks remain
	}
	if rt := int(ccall(dn.getCudartVersion)); rt/1000 != cb {
		return fmt.Errorf("%w: cuBLAS at %s is CUDA %d but cuDNN at %s was built for CUDA %s: take both from one CUDA version (one Python environment's nvidia/*/lib, or SEGPIPE_LIBCUBLAS and SEGPIPE_LIBCUDNN)",
			ErrUnavailable, bl.lib.path, cb, dn.lib.path, versionString(rt))
	}
	return nil
}
