package optim

import (
	"fmt"
	"math"
)

// EMA keeps an exponential moving average of the model's floating-point
// state (parameters and normalisation running statistics), as the
// reference's ModelEMA: at update u, d = Decay·(1 − exp(−u/Tau)) and
// ema ← d·ema + (1 − d)·model.
type EMA struct {
	// Decay (0.9999) and Tau (2000) shape the ramp.
	Decay, Tau float64
	// Updates counts Update calls (restore it on resume).
	Updates int
	values  [][]float32
}

// NewEMA copies state as the average's starting point.
func NewEMA(state [][]float32) *EMA {
	e := &EMA{Decay: 0.9999, Tau: 2000, values: make([][]float32, len(state))}
	for i, s := range state {
		e.values[i] = append([]float32(nil), s...)
	}
	return e
}

// D returns the decay used at update u.
func (e *EMA) D(u int) float64 { return e.Decay * (1 - math.Exp(-float64(u)/e.Tau)) }

// Update folds the current state into the average; state must match
// NewEMA's in count and lengths.
func (e *EMA) Update(state [][]float32) error {
	if len(state) != len(e.values) {
		return fmt.Errorf("optim: ema has %d tensors, update has %d", len(e.values), len(state))
	}
	for i, s := range state {
		if len(s) != len(e.values[i]) {
			return fmt.Errorf("optim: ema tensor %d has %d values, update has %d", i, len(e.values[i]), len(s))
		}
	}
	e.Updates++
	d := float32(e.D(e.Updates))
	w := 1 - d
	for i, s := range state {
		v := e.values[i]
		for j, x := range s {
			v[j] = v[j]*d + w*x
		}
	}
	return nil
}

// Values returns the averaged state (owned by the EMA; copy before mutating).
func (e *EMA) Values() [][]float32 { return e.values }
