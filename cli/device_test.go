package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

func TestDeviceReport(t *testing.T) {
	var b strings.Builder
	err := writeDeviceReport(&b, cuda.Report{
		Driver: cuda.LibInfo{Name: "CUDA driver", Version: "13.0", Path: "/usr/lib/libcuda.so.1"},
		Libraries: []cuda.LibInfo{
			{Name: "cuBLAS", Version: "13.0.2", Path: "/venv/nvidia/cu13/lib/libcublas.so.13"},
			{Name: "cuDNN", Err: errors.New("libcudnn.so.9 not found")},
		},
		GPUs: []cuda.GPU{{Name: "NVIDIA H200", Major: 9, Minor: 0, SMs: 132, Memory: 150 << 30, PCIBus: 24}},
	})
	if err != nil {
		t.Fatalf("a host with a GPU should succeed: %v", err)
	}
	for _, want := range []string{"CUDA driver  13.0", "/venv/nvidia/cu13/lib/libcublas.so.13", "cuDNN        not available: libcudnn.so.9 not found",
		"gpu 0       NVIDIA H200, compute 9.0, 132 SMs, 150.0 GiB"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestDeviceCommandWithoutGPU runs the command itself: on a host without a
// GPU (CI) it must exit 1 naming what is missing, never panic; on a GPU
// host it lists the GPUs.
func TestDeviceCommandWithoutGPU(t *testing.T) {
	code, out, errOut := run(t, "device")
	if code == ExitOK {
		if !strings.Contains(out, "gpu 0") {
			t.Errorf("exit 0 without listing a GPU:\n%s", out)
		}
		return
	}
	if code != ExitFailure || !strings.Contains(errOut, "no usable GPU") || !strings.Contains(out, "CUDA driver") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
