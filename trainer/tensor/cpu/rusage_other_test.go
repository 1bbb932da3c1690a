//go:build !unix

package cpu

import (
	"testing"
	"time"
)

func cpuMeter(b *testing.B) func() { return func() {} }

// processCPU is unavailable here; benchmarks then report wall time only
// (a zero duration makes the per-CPU-second rate read +Inf).
func processCPU() time.Duration { return 0 }
