// Package device names the backends a run can be bound to and opens them:
// "cpu" (the reference kernels on host memory), "emu" (the same kernels on
// memory the host cannot see, every crossing counted) and "cuda" (not in
// this build: it reports ErrUnavailable).
package device

import (
	"errors"
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// Names lists the devices Open knows, for flag help.
var Names = []string{"cpu", "emu", "cuda"}

// ErrUnavailable is returned for a known device this build cannot run on.
var ErrUnavailable = errors.New("not available in this build")

// Open returns the backend for name. "cpu" is the process-wide CPU
// backend (the one tensor.New and freshly built models use); each "emu"
// is a fresh emulated device with its own transfer counters.
func Open(name string) (backend.Backend, error) {
	switch name {
	case "cpu", "":
		return tensor.CPU(), nil
	case "emu":
		return cpu.NewEmulated(), nil
	case "cuda":
		return nil, fmt.Errorf("device cuda: %w: the CUDA backend has not landed yet, so no driver is probed (use --device cpu, or emu to check the device boundary)", ErrUnavailable)
	}
	return nil, fmt.Errorf("device %q: unknown (want cpu, emu or cuda)", name)
}
