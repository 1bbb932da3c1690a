// Command segpipe converts COCO-format datasets into Parquet shards, streams
// augmented training batches with instance masks, serves them to remote
// trainers and trains YOLO26-seg style models.
package main

import (
	"context"
	"os"

	"github.com/segpipe/segpipe/cli"
)

func main() {
	cli.SetGCTarget()
	// A runtime fatal error (out of memory) exits 2 before Run returns,
	// like a usage error; package cli's doc says why nothing here can
	// change that.
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr))
}
