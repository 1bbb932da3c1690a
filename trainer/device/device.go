// Package device names the backends a run can be bound to and opens them:
// "cpu" (the reference kernels on host memory), "emu" (the same kernels on
// memory the host cannot see, every crossing counted) and "cuda" (the
// first GPU through the run-time CUDA binding of trainer/tensor/cuda).
package device

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// Names lists the devices Open knows, for flag help.
var Names = []string{"cpu", "emu", "cuda"}

// ErrUnavailable is returned for a known device this host or build
// cannot run on; the error also wraps the cause (for cuda, an error
// wrapping cuda.ErrUnavailable that names the missing library and the
// paths tried, or the missing device).
var ErrUnavailable = errors.New("not available")

// TF32Env is the environment variable that, set to a true value ("1",
// "true"), lets the cuda backend's GEMMs and convolutions round inputs to
// TF32 on tensor cores. Off by default: results then match the CPU
// reference to fp32 tolerances.
const TF32Env = "SEGPIPE_TF32"

// TF32 reports whether TF32Env asks for TF32 math.
func TF32() (bool, error) {
	v := os.Getenv(TF32Env)
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1/true or 0/false", TF32Env, v)
	}
	return on, nil
}

// The cuda backend is process-wide per math mode, as the CPU one is: a
// device's context, pool and cached convolution plans serve every model
// and tensor of the run, and opening it again (a configuration check
// before the run) returns the same backend.
var cudaBackends struct {
	sync.Mutex
	be [2]*cuda.Backend
}

func openCUDA() (backend.Backend, error) {
	tf32, err := TF32()
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w", err)
	}
	i := 0
	if tf32 {
		i = 1
	}
	cudaBackends.Lock()
	defer cudaBackends.Unlock()
	if be := cudaBackends.be[i]; be != nil {
		return be, nil
	}
	be, err := cuda.NewBackend(0, cuda.Options{TF32: tf32})
	if err != nil {
		if errors.Is(err, cuda.ErrUnavailable) {
			return nil, fmt.Errorf("device cuda: %w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("device cuda: %w", err)
	}
	cudaBackends.be[i] = be
	return be, nil
}

// Open returns the backend for name. "cpu" is the process-wide CPU
// backend (the one tensor.New and freshly built models use); each "emu"
// is a fresh emulated device with its own transfer counters; "cuda" is
// GPU 0, opened once per process (TF32 per TF32Env), or an error
// wrapping ErrUnavailable that says what is missing: the driver or a
// library (with the paths tried), or a device.
func Open(name string) (backend.Backend, error) {
	switch name {
	case "cpu", "":
		return tensor.CPU(), nil
	case "emu":
		return cpu.NewEmulated(), nil
	case "cuda":
		return openCUDA()
	}
	return nil, fmt.Errorf("device %q: unknown (want cpu, emu or cuda)", name)
}
