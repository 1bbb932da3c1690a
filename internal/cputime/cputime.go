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
