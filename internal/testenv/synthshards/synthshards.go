// Package synthshards writes synthetic COCO data sets (datasets/synth) as
// shards, the way `segpipe convert coco` would, for tests and benchmarks
// of the packages that read shards.
package synthshards

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// Write generates sc's images and annotations under a temporary directory
// of tb and converts them into shards there; it returns the shard
// directory and the data set's. Any failure fails tb.
func Write(tb testing.TB, sc synth.Config) (shards, data string) {
	tb.Helper()
	root := tb.TempDir()
	data, shards = filepath.Join(root, "data"), filepath.Join(root, "shards")
	if err := synth.Generate(data, sc); err != nil {
		tb.Fatal(err)
	}
	ds, err := coco.Open(synth.AnnotationsPath(data, sc), synth.ImagesDir(data), coco.Options{Workers: sc.Workers})
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
	return shards, data
}
