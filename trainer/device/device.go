// Package device names the backends a run can be bound to and opens them:
// "cpu" (the reference kernels on host memory), "emu" (the same kernels on
// memory the host cannot see, every crossing counted) and "cuda" (the
// first GPU through the run-time CUDA binding of trainer/tensor/cuda).
//
// What a device can do is decided here, once: Open hands back a Device
// whose parts — the backend, the loss's and the optimiser's kernels, the
// batch's way up and the loss's way down — are already chosen, host
// versions for cpu and emu, device versions for cuda. Training code calls
// those parts and never asks the backend what it can do.
package device

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/loss/losscuda"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// Device is an opened device: its backend and the parts of a training
// step that depend on what it can do, chosen when it opened.
type Device struct {
	// Backend holds the tensors and runs the ops.
	Backend backend.Backend
	// Loss is where the fused loss runs (loss.Criterion.ForwardOn).
	Loss loss.On
	// Optim is where the optimiser, clipping and the EMA run.
	Optim optim.Kernels
	// Stager takes a batch up: the backend's double-buffered staging on a
	// copy stream (cuda), or UploadBytes into two reused slots (cpu, emu;
	// HostStager). Either way each part is one counted upload.
	Stager backend.Stager
	// Windows expands windowed mask stacks on the device (cuda); nil where
	// the host expands them and the batch goes up dense.
	Windows backend.WindowExpander
	// Fetcher brings a step's loss down while the next step is queued
	// (cuda); nil where the loss is read as soon as it is computed.
	Fetcher backend.Fetcher
	// Host says the kernels run on host memory (cpu, emu): the weights,
	// gradients and activations are the host's to hold.
	Host bool
}

// Name is the backend's name.
func (d *Device) Name() string { return d.Backend.Name() }

// Host is the Device of a backend whose kernels run on host memory (cpu,
// emu, or a test's wrapper of one): the loss and the optimiser run their
// Go code through RunHost, batches go up through a HostStager, and the
// loss is read at once.
func Host(be backend.HostBackend) *Device {
	return &Device{Backend: be, Loss: loss.OnHost(be), Optim: optim.HostKernels(be),
		Stager: NewHostStager(be), Host: true}
}

// CUDA is the Device of a cuda backend (NewBackend, or the CPU harness's
// NewHarnessBackend): the loss's twins from trainer/loss/losscuda, the
// backend's optimiser kernels, staging, window expansion and fetches.
func CUDA(be *cuda.Backend) *Device {
	return &Device{Backend: be, Loss: loss.OnDevice(be, losscuda.New(be)), Optim: optim.TwinKernels(be),
		Stager: be, Windows: be, Fetcher: be}
}

// Names lists the devices Open knows, for flag help.
var Names = []string{"cpu", "emu", "cuda"}

// ErrUnavailable is returned for a known device this host or build
// cannot run on; the error also wraps the cause (for cuda, an error
// wrapping cuda.ErrUnavailable that names the missing library and the
// paths tried, or the missing device).
var ErrUnavailable = errors.New("not available")

// TF32Env is the environment variable that, when set, overrides the
// precision a run asks for: a true value ("1", "true") lets the cuda
// backend's GEMMs and convolutions round inputs to TF32 on tensor cores,
// a false one keeps everything strict fp32 (results then match the CPU
// reference to fp32 tolerances).
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
	dev map[cuda.Options]*Device
}

// cudaOptions are the backend options of a precision name (see
// OpenPrecision); TF32Env, when set, decides instead.
func cudaOptions(precision string) (cuda.Options, error) {
	if v := os.Getenv(TF32Env); v != "" {
		tf32, err := TF32()
		if err != nil {
			return cuda.Options{}, err
		}
		return cuda.Options{TF32: tf32}, nil
	}
	return cuda.Precision(precision)
}

func openCUDA(precision string) (*Device, error) {
	opts, err := cudaOptions(precision)
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w", err)
	}
	cudaBackends.Lock()
	defer cudaBackends.Unlock()
	if d := cudaBackends.dev[opts]; d != nil {
		return d, nil
	}
	be, err := cuda.NewBackend(0, opts)
	if err != nil {
		if errors.Is(err, cuda.ErrUnavailable) {
			return nil, fmt.Errorf("device cuda: %w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("device cuda: %w", err)
	}
	if cudaBackends.dev == nil {
		cudaBackends.dev = map[cuda.Options]*Device{}
	}
	d := CUDA(be)
	cudaBackends.dev[opts] = d
	return d, nil
}

// Open returns the device name at its default precision (OpenPrecision
// with ""). "cpu" is the process-wide CPU backend (cpu.Default, the one
// freshly built models use), a fresh Device on it each call; each "emu" is a fresh
// emulated device with its own transfer counters; "cuda" is GPU 0, opened
// once per process and precision, or an error wrapping ErrUnavailable
// that says what is missing: the driver or a library (with the paths
// tried), or a device.
func Open(name string) (*Device, error) { return OpenPrecision(name, "") }

// Precisions are the names OpenPrecision takes, for flag help.
var Precisions = cuda.Precisions

// OpenPrecision is Open with the math of a "cuda" backend: "tf32" (or "",
// the default) is PyTorch's defaults, TF32 convolutions and fp32 GEMMs
// (torch.backends.cudnn.allow_tf32 on, torch.backends.cuda.matmul
// .allow_tf32 off); "fp32" is strict fp32 everywhere, to compare with the
// CPU reference. TF32Env, when set, decides instead (1: TF32 GEMMs and
// convolutions, 0: strict). cpu and emu compute in fp32 whatever it says.
func OpenPrecision(name, precision string) (*Device, error) {
	switch name {
	case "cpu", "", "emu":
		if _, err := cuda.Precision(precision); err != nil {
			return nil, fmt.Errorf("device %s: %w", name, err)
		}
		if name == "emu" {
			return Host(cpu.NewEmulated()), nil
		}
		return Host(cpu.Default()), nil
	case "cuda":
		return openCUDA(precision)
	}
	return nil, fmt.Errorf("device %q: unknown (want cpu, emu or cuda)", name)
}
