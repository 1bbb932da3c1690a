package optim

import "math"

// Schedule is the reference trainer's learning-rate, momentum and
// accumulation schedule: linear warmup over the first iterations, a linear
// decay of the learning rate to LRF·lr0 over the epochs, and gradient
// accumulation growing to the nominal batch.
type Schedule struct {
	// Epochs and BatchesPerEpoch size the run; Batch and NBS (nominal
	// batch, 64) set the accumulation.
	Epochs, BatchesPerEpoch, Batch, NBS int
	// LRF is the final lr as a fraction of lr0 (0.01).
	LRF float64
	// WarmupEpochs (3), WarmupMomentum (0.8) → Momentum (0.937) and
	// WarmupBiasLR (0.1, or 0 under auto: the bias groups' starting lr).
	WarmupEpochs, WarmupMomentum, Momentum, WarmupBiasLR float64
}

// DefaultSchedule returns the reference's defaults for a run; set
// WarmupBiasLR to 0 when the optimiser was chosen by Auto.
func DefaultSchedule(epochs, batchesPerEpoch, batch int) Schedule {
	return Schedule{Epochs: epochs, BatchesPerEpoch: batchesPerEpoch, Batch: batch, NBS: 64,
		LRF: 0.01, WarmupEpochs: 3, WarmupMomentum: 0.8, Momentum: 0.937, WarmupBiasLR: 0.1}
}

// LF is the linear lr factor of epoch e: max(1 − e/epochs, 0)·(1 − lrf) + lrf.
func (s Schedule) LF(epoch int) float64 {
	return max(1-float64(epoch)/float64(s.Epochs), 0)*(1-s.LRF) + s.LRF
}

// WarmupIters is nw = max(round(warmup_epochs·nb), 100), or -1 (no warmup)
// when WarmupEpochs is 0.
func (s Schedule) WarmupIters() int {
	if s.WarmupEpochs <= 0 {
		return -1
	}
	return max(int(math.RoundToEven(s.WarmupEpochs*float64(s.BatchesPerEpoch))), 100)
}

// nominalAccumulate is max(round(nbs/batch), 1).
func (s Schedule) nominalAccumulate() int {
	return max(int(math.RoundToEven(float64(s.NBS)/float64(s.Batch))), 1)
}

func interp(x, x1, y0, y1 float64) float64 {
	if x >= x1 {
		return y1
	}
	return y0 + (y1-y0)*x/x1
}

// Apply sets every group's LR and Momentum for global iteration ni of
// epoch and returns the accumulation (in batches) in force. Bias groups
// start their warmup at WarmupBiasLR, the others at 0.
func (s Schedule) Apply(groups []*Group, epoch, ni int) (accumulate int) {
	lf := s.LF(epoch)
	nw := s.WarmupIters()
	if ni <= nw {
		x, xw := float64(ni), float64(nw)
		for _, g := range groups {
			start := 0.0
			if g.Kind == KindBias {
				start = s.WarmupBiasLR
			}
			g.LR = interp(x, xw, start, g.InitialLR*lf)
			g.Momentum = interp(x, xw, s.WarmupMomentum, s.Momentum)
		}
		return max(1, int(math.RoundToEven(interp(x, xw, 1, float64(s.NBS)/float64(s.Batch)))))
	}
	for _, g := range groups {
		g.LR = g.InitialLR * lf
		g.Momentum = s.Momentum
	}
	return s.nominalAccumulate()
}

// Accumulator decides when accumulated gradients are applied: a step is
// due when ni − (last step's ni) ≥ accumulate. The zero value has not
// stepped yet (last = −1), so iteration 0 steps.
type Accumulator struct {
	last    int
	started bool
}

// Due reports whether iteration ni should step and, if so, records it.
func (a *Accumulator) Due(ni, accumulate int) bool {
	last := a.last
	if !a.started {
		last = -1
	}
	if ni-last < accumulate {
		return false
	}
	a.last, a.started = ni, true
	return true
}

// Last returns the iteration of the last step (−1 before the first), for
// checkpoints.
func (a *Accumulator) Last() int {
	if !a.started {
		return -1
	}
	return a.last
}

// Restore sets the iteration of the last step, e.g. on resume.
func (a *Accumulator) Restore(last int) { a.last, a.started = last, last >= 0 }
