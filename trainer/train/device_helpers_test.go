package train

import (
	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// deviceOf is the device a test's backend stands for, as device.Open
// would have chosen its parts: device.Host of a backend with host
// kernels (cpu, emu and the wrappers that embed them), with the
// wrapper's own staging, window expansion (a staging expander) and
// fetches where it has them; a backend without host kernels gets only
// the loss's host round trip. nil stays nil.
func deviceOf(be backend.Backend) *device.Device {
	if be == nil {
		return nil
	}
	hb, ok := be.(backend.HostBackend)
	if !ok {
		return &device.Device{Backend: be, Loss: loss.On{Backend: be}}
	}
	d := device.Host(hb)
	st, staged := be.(backend.Stager)
	if staged {
		d.Stager = st
	}
	if wx, ok := be.(backend.WindowExpander); ok && staged {
		d.Windows = wx
	}
	if f, ok := be.(backend.Fetcher); ok {
		d.Fetcher = f
	}
	return d
}
