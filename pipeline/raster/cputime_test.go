package raster

import "github.com/segpipe/segpipe/internal/cputime"

// processCPU returns the process's CPU time in ns: on a shared machine it
// leaves out the time spent waiting for a core, which wall-clock ns/op
// includes.
func processCPU() (int64, bool) {
	d, ok := cputime.Process()
	return int64(d), ok
}
