package cli

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/train"
)

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the segpipe version and the CPU reference it is held to",
		Description: "Prints the segpipe version, the Go toolchain it was built with, the trainer's\n" +
			"devices and CPU kernels, and the frozen CPU reference (testdata/frozen/<release>:\n" +
			"loader digests, training-step losses and evaluation numbers for fixed seeds) that\n" +
			"the trainer's tests hold this build to; device backends are judged against it.\n\n" +
			"Example:\n  segpipe version",
		Action: func(ctx context.Context, c *ucli.Command) error {
			_, err := fmt.Fprintf(c.Root().Writer, "segpipe %s\n%s %s/%s\ndevices: %s\ncpu kernels: %s\nfrozen reference: %s (testdata/frozen/%s)\n",
				Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(device.Names, ", "),
				cpu.KernelName(), train.FrozenReference, train.FrozenReference)
			return err
		},
	}
}
