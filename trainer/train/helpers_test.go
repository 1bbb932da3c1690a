package train

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/augment"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func defaultAugFrom(c Config) augment.Config {
	t := &trainer{cfg: c}
	return t.augment()
}

// benchShards writes n synthetic COCO-sized images (long side 640) as shards.
func benchShards(tb testing.TB, n int) string {
	tb.Helper()
	root := tb.TempDir()
	data, shards := filepath.Join(root, "data"), filepath.Join(root, "shards")
	sc := synth.Config{Images: n, Seed: 5}
	if err := synth.Generate(data, sc); err != nil {
		tb.Fatal(err)
	}
	ds, err := coco.Open(synth.AnnotationsPath(data, sc), synth.ImagesDir(data), coco.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := shard.Create(shards, shard.WriterOptions{Categories: ds.Categories(), Source: shard.Source{Kind: "coco"}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := ds.Images(context.Background(), 0, w.Write); err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Close(nil); err != nil {
		tb.Fatal(err)
	}
	return shards
}
