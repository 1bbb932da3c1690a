// Package cputime reads the process's CPU time. Benchmarks and `segpipe
// bench` report it beside wall time because on a shared machine wall time
// also measures the neighbours, while CPU time measures the work.
package cputime

import "time"

// Process returns the user+system CPU time of the whole process (all
// threads) and whether the platform provides it.
func Process() (time.Duration, bool) { return process() }

// Seconds is Process in seconds, 0 where unavailable.
func Seconds() float64 {
	d, _ := process()
	return d.Seconds()
}

// Meter starts a measurement: the returned function passes report the CPU
// seconds used since Meter was called. Where the platform has no process
// CPU time report is never called, so a benchmark reports no figure rather
// than a wrong one.
func Meter(report func(cpuSeconds float64)) func() {
	start, ok := process()
	return func() {
		if end, _ := process(); ok {
			report((end - start).Seconds())
		}
	}
}
