package optim

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// EMA keeps an exponential moving average of the model's floating-point
// state (parameters and normalisation running statistics), as the
// reference's ModelEMA: at update u, d = Decay·(1 − exp(−u/Tau)) and
// ema ← d·ema + (1 − d)·model. The average lives in buffers on a backend
// (a second model's state, so that evaluating it needs no copy) and each
// update is one kernel there; Values and Load are its crossings.
type EMA struct {
	// Decay (0.9999) and Tau (2000) shape the ramp.
	Decay, Tau float64
	// Updates counts Update calls (restore it on resume).
	Updates int
	be      backend.Backend
	k       Kernels
	avg     []backend.Buffer
	// host is NewEMA's backend, on which Update wraps host state; nil
	// for an average NewEMAOn made.
	host backend.HostMemory
}

// NewEMA copies host state as the average's starting point, on host, a
// backend whose memory is the host's (the CPU backend): the host form of
// NewEMAOn.
func NewEMA(host backend.HostMemory, state [][]float32) *EMA {
	avg := make([]backend.Buffer, len(state))
	for i, s := range state {
		avg[i] = host.Wrap(append([]float32(nil), s...))
	}
	e := newEMA(host, HostKernels(host), avg)
	e.host = host
	return e
}

// NewEMAOn starts an average in avg, buffers on be that the EMA updates
// from now on with k (the device's Optim), from a copy of state (made on
// be: nothing crosses).
func NewEMAOn(be backend.Backend, k Kernels, avg, state []backend.Buffer) (*EMA, error) {
	if !k.set() {
		return nil, fmt.Errorf("optim: ema on %s without kernels", be.Name())
	}
	if err := checkState(avg, state); err != nil {
		return nil, err
	}
	for i, s := range state {
		be.Copy(backend.Strided{Shape: []int{s.Len}, Src: []int{1}, Dst: []int{1}}, s, avg[i])
	}
	return newEMA(be, k, avg), nil
}

func newEMA(be backend.Backend, k Kernels, avg []backend.Buffer) *EMA {
	return &EMA{Decay: 0.9999, Tau: 2000, be: be, k: k, avg: avg}
}

func checkState(avg, state []backend.Buffer) error {
	if len(state) != len(avg) {
		return fmt.Errorf("optim: ema has %d tensors, update has %d", len(avg), len(state))
	}
	for i, s := range state {
		if s.Len != avg[i].Len {
			return fmt.Errorf("optim: ema tensor %d has %d values, update has %d", i, avg[i].Len, s.Len)
		}
	}
	return nil
}

// D returns the decay used at update u.
func (e *EMA) D(u int) float64 { return e.Decay * (1 - math.Exp(-float64(u)/e.Tau)) }

// Update folds host state into an average NewEMA made (the host form of
// UpdateOn); state must match NewEMA's in count and lengths.
func (e *EMA) Update(state [][]float32) error {
	if e.host == nil {
		return fmt.Errorf("optim: host-form ema update on an average on %s (NewEMAOn: use UpdateOn)", e.be.Name())
	}
	bufs := make([]backend.Buffer, len(state))
	for i, s := range state {
		bufs[i] = e.host.Wrap(s)
	}
	return e.UpdateOn(bufs)
}

// UpdateOn folds the current state, buffers on the EMA's backend matching
// the average in count and lengths, into the average: one kernel.
func (e *EMA) UpdateOn(state []backend.Buffer) error {
	if err := checkState(e.avg, state); err != nil {
		return err
	}
	e.Updates++
	d := float32(e.D(e.Updates))
	if dk := e.k.Device; dk != nil {
		dk.EMAUpdate(e.avg, state, d)
		return nil
	}
	w := 1 - d
	e.k.Host.RunHost(func(vw backend.View) {
		for i, s := range state {
			v := vw.Float32(e.avg[i])
			for j, x := range vw.Float32(s) {
				v[j] = v[j]*d + w*x
			}
		}
	})
	return nil
}

// Values returns the averaged state as host values: the EMA's own memory
// where the backend serves host views (the CPU: copy before mutating),
// otherwise a download (a checkpoint's explicit crossing).
func (e *EMA) Values() [][]float32 {
	out := make([][]float32, len(e.avg))
	for i, b := range e.avg {
		if out[i] = e.be.Host(b); out[i] == nil {
			out[i] = download(e.be, b)
		}
	}
	return out
}

// Load replaces the average with host values (resuming a run), an upload
// per tensor; they must match the average in count and lengths.
func (e *EMA) Load(values [][]float32) error {
	if len(values) != len(e.avg) {
		return fmt.Errorf("optim: ema has %d tensors, %d given", len(e.avg), len(values))
	}
	for i, v := range values {
		if len(v) != e.avg[i].Len {
			return fmt.Errorf("optim: ema tensor %d has %d values, %d given", i, e.avg[i].Len, len(v))
		}
	}
	for i, v := range values {
		e.be.Upload(e.avg[i], v)
	}
	return nil
}
