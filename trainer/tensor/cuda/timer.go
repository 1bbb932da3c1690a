package cuda

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoTimer is returned by StartTimer on an engine without device
// events (the CPU harness).
var ErrNoTimer = errors.New("cuda: this backend's engine has no device timer")

// Timer measures the device time of the work queued on a Backend's
// compute stream between StartTimer and Stop, with a pair of timing
// events: set against the host's time to queue the same work, it says
// whether a step is bound by the host or by the GPU.
type Timer struct {
	d          *device
	start, end event
}

// StartTimer records a timing event at the end of the compute stream.
func (be *Backend) StartTimer() (*Timer, error) {
	g, ok := be.e.(*gpuEngine)
	if !ok {
		return nil, ErrNoTimer
	}
	t := &Timer{d: g.device}
	var err error
	if t.start, err = g.NewEvent(true); err != nil {
		return nil, err
	}
	if t.end, err = g.NewEvent(true); err != nil {
		g.DestroyEvent(t.start)
		return nil, err
	}
	if err := g.Record(t.start, g.Stream()); err != nil {
		t.destroy()
		return nil, err
	}
	return t, nil
}

// Stop records the end event, waits for it (the one host wait) and
// returns the device time between the two events; the Timer is spent.
func (t *Timer) Stop() (time.Duration, error) {
	defer t.destroy()
	if err := t.d.Record(t.end, t.d.Stream()); err != nil {
		return 0, err
	}
	if err := t.d.SyncEvent(t.end); err != nil {
		return 0, err
	}
	ms, err := t.d.Elapsed(t.start, t.end)
	if err != nil {
		return 0, fmt.Errorf("cuda: device timer: %w", err)
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

func (t *Timer) destroy() {
	t.d.DestroyEvent(t.start)
	t.d.DestroyEvent(t.end)
}
