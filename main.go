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
	os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr))
}
