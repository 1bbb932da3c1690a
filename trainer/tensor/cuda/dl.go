//go:build !nocuda

package cuda

import "github.com/ebitengine/purego"

// bindingBuilt reports whether this build can bind the CUDA libraries.
const bindingBuilt = true

func dlopen(path string) (uintptr, error) {
	// RTLD_GLOBAL so that a dependency loaded first (cuBLASLt, the cuDNN
	// sub-libraries) satisfies the library opened after it.
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

// ccall calls the C function fn with integer and pointer arguments and
// returns its integer result. uintptrescapes moves whatever an argument
// converted from unsafe.Pointer points to onto the heap, so a stack move
// during the call cannot leave the callee a stale address.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// bindFunc makes *fptr call fn; used for the few functions that take
// floating-point arguments by value, which ccall cannot pass.
func bindFunc(fptr any, fn uintptr) { purego.RegisterFunc(fptr, fn) }
