package cpu

import (
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/cputime"
)

// processCPU is the CPU time of the whole process (0 where unavailable; a
// per-CPU-second rate then reads +Inf).
func processCPU() time.Duration {
	d, _ := cputime.Process()
	return d
}

// cpuMeter reports CPU milliseconds per op next to wall time: on a shared
// machine wall time swings with other load, CPU time much less.
func cpuMeter(b *testing.B) func() {
	start, ok := cputime.Process()
	return func() {
		if end, _ := cputime.Process(); ok {
			b.ReportMetric(float64(end-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		}
	}
}
