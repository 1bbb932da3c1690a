package train

import (
	"io"
	"log/slog"
	"testing"

	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/internal/testenv/synthshards"
	"github.com/segpipe/segpipe/pipeline/augment"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func defaultAugFrom(c Config) augment.Config { return c.Augment() }

// benchShards writes n synthetic COCO-sized images (long side 640) as shards.
func benchShards(tb testing.TB, n int) string {
	tb.Helper()
	shards, _ := synthshards.Write(tb, synth.Config{Images: n, Seed: 5})
	return shards
}
