package train

import (
	"context"

	"github.com/segpipe/segpipe/pipeline"
)

// Data is where a run's batches come from: shards on this machine (Local)
// or a loader on another machine behind a segpipe server. The trainer
// describes each stream it needs (training from a resume position, or
// validation) as a loader configuration and consumes whatever
// pipeline.Batches the Data returns.
type Data interface {
	// Images is the number of images one epoch holds.
	Images() int
	// Open starts a stream of batches as a loader configured with cfg
	// would produce them.
	Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error)
}

// Local returns the Data of a source on this machine: each stream is a
// pipeline.Loader over src.
func Local(src pipeline.Source) Data { return localData{src} }

type localData struct{ src pipeline.Source }

func (d localData) Images() int {
	n := 0
	for _, r := range d.src.BlockRows() {
		n += r
	}
	return n
}

func (d localData) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	return pipeline.New(ctx, d.src, cfg)
}
