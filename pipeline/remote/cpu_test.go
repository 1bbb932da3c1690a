package remote

import "github.com/segpipe/segpipe/internal/cputime"

// cpuSeconds is the process's CPU time: on a shared machine it measures the
// work where wall time also measures the neighbours.
func cpuSeconds() float64 { return cputime.Seconds() }
