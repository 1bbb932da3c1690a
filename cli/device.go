package cli

import (
	"context"
	"fmt"
	"io"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

func deviceCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "device",
		Usage: "list the CUDA driver, libraries and GPUs this host offers",
		Description: "Loads the CUDA driver (libcuda.so.1), cuBLAS (libcublas.so.13, else .12) and cuDNN 9\n" +
			"(libcudnn.so.9) the way `train --device cuda` does, and prints each one's version and\n" +
			"path, then every GPU with its compute capability, multiprocessors and memory.\n" +
			"Libraries are searched in SEGPIPE_LIBCUDA / SEGPIPE_LIBCUBLAS / SEGPIPE_LIBCUDNN (a full\n" +
			"path, tried alone), LD_LIBRARY_PATH, the system library directories, then the\n" +
			"nvidia/*/lib folders of a Python environment (VIRTUAL_ENV, CONDA_PREFIX, /opt/torch/.venv).\n" +
			"Exits 1 with the reason when no GPU can be used, so scripts can test for one.\n\n" +
			"Example:\n  segpipe device",
		Action: func(ctx context.Context, c *ucli.Command) error {
			return writeDeviceReport(c.Root().Writer, cuda.Probe())
		},
	}
}

// writeDeviceReport prints r and returns an error when no GPU is usable.
func writeDeviceReport(w io.Writer, r cuda.Report) error {
	line := func(l cuda.LibInfo) {
		if l.Err != nil {
			fmt.Fprintf(w, "%-12s not available: %v\n", l.Name, l.Err)
			return
		}
		fmt.Fprintf(w, "%-12s %-10s %s\n", l.Name, l.Version, l.Path)
	}
	line(r.Driver)
	for _, l := range r.Libraries {
		line(l)
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(w, "gpu %d       %s, compute %d.%d, %d SMs, %.1f GiB, PCI bus %d\n",
			g.Ordinal, g.Name, g.Major, g.Minor, g.SMs, float64(g.Memory)/(1<<30), g.PCIBus)
	}
	if len(r.GPUs) == 0 {
		return fmt.Errorf("no usable GPU: %w", r.GPUErr)
	}
	return nil
}
