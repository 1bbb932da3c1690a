//go:build nocuda

package cuda

import "fmt"

// bindingBuilt reports whether this build can bind the CUDA libraries.
const bindingBuilt = false

func dlopen(path string) (uintptr, error) {
	return 0, fmt.Errorf("%w: this segpipe was built with -tags nocuda (a fully static binary without the run-time CUDA binding)", ErrUnavailable)
}

func dlsym(uintptr, string) (uintptr, error) {
	return 0, fmt.Errorf("%w: built with -tags nocuda", ErrUnavailable)
}

// ccall is unreachable: no library ever opens in this build.
func ccall(uintptr, ...uintptr) uintptr { panic("cuda: ccall in a nocuda build") }

func bindFunc(any, uintptr) { panic("cuda: bindFunc in a nocuda build") }
