package cli

import (
	"os"
	"runtime/debug"
)

// GCPercent is the collector's target of a segpipe process unless GOGC is
// set. segpipe's heap is mostly long-lived pointer-free buffers (the
// decoded-image cache, batch pools, model tensors), which a collection
// marks at almost no cost. Go's default of 100 lets garbage grow to the
// size of that live heap before it collects: at the default cache the
// loader's peak RSS then reached 1.5 GiB in a 5,120-image run, all of it
// memory faulted in for the first time. 25 keeps the peak within a quarter
// of the live heap and cost less CPU, not more (BENCHMARKS.md,
// "Garbage-collector target").
const GCPercent = 25

// SetGCTarget sets the collector's target to GCPercent unless GOGC is set:
// what a program running Run (the binary, the Python package's console
// script) does first.
func SetGCTarget() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(GCPercent)
	}
}
