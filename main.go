// Command segpipe converts COCO-format datasets into Parquet shards, streams
// augmented training batches with instance masks, serves them to remote
// trainers and trains YOLO26-seg style models.
package main

import (
	"context"
	"os"
	"runtime/debug"

	"github.com/segpipe/segpipe/cli"
)

// gcPercent is the collector's target unless GOGC is set. segpipe's heap is
// mostly long-lived pointer-free buffers (the decoded-image cache, batch
// pools, model tensors), which a collection marks at almost no cost. Go's
// default of 100 lets garbage grow to the size of that live heap before it
// collects: at the default cache the loader's peak RSS then reached 1.5 GiB
// in a 5,120-image run, all of it memory faulted in for the first time. 25
// keeps the peak within a quarter of the live heap and cost less CPU, not
// more (BENCHMARKS.md, "Garbage-collector target").
const gcPercent = 25

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	// A runtime fatal error (out of memory) exits 2 before Run returns,
	// like a usage error; package cli's doc says why nothing here can
	// change that.
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr))
}
