//go:build unix

package raster

import "syscall"

// processCPU returns the user+system CPU time of the process in ns. On a
// shared, oversubscribed machine it leaves out the time spent waiting for a
// core, which wall-clock ns/op includes.
func processCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
