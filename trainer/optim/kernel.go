package optim

import (
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Kernels are where this package's fused kernels run on a backend's
// memory, chosen once when the device opens (trainer/device's Optim):
// Host, a backend that runs Go kernels on its own memory (cpu, emu),
// runs the Go code here through RunHost, and nothing crosses; Device is
// the backend's twins of them (cuda). Exactly one is set.
type Kernels struct {
	Host   backend.HostKernels
	Device DeviceKernels
}

// HostKernels are the Kernels of a backend that runs Go kernels on its
// own memory.
func HostKernels(hk backend.HostKernels) Kernels { return Kernels{Host: hk} }

// TwinKernels are the Kernels of a backend with this package's device
// twins.
func TwinKernels(dk DeviceKernels) Kernels { return Kernels{Device: dk} }

// set reports whether k names somewhere to run.
func (k Kernels) set() bool { return k.Host != nil || k.Device != nil }

// zeroed allocates n elements on be, set to zero (a fresh moment buffer).
func zeroed(be backend.Backend, n int) backend.Buffer {
	b := be.Alloc(n)
	be.Fill(b, 0)
	return b
}

// upload allocates a buffer on be holding a copy of v (LoadState).
func upload(be backend.Backend, v []float32) backend.Buffer {
	b := be.Alloc(len(v))
	be.Upload(b, v)
	return b
}

// download returns a host copy of b (State, checkpoints).
func download(be backend.Backend, b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	be.Download(v, b)
	return v
}
