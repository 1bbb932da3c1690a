// Package exampledata makes the small shard sets that the runnable
// examples of the public packages stream: synthetic COCO images
// (datasets/synth) converted as `segpipe convert coco` converts them.
// It exists so that each example shows its own subject, not the setup.
package exampledata

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// Shards writes images synthetic images of at most maxSide pixels a side
// under dir and converts them into a shard set, whose path it returns.
func Shards(dir string, images, maxSide int) (string, error) {
	sc := synth.Config{Images: images, Seed: 1, MaxSide: maxSide}
	data, shards := filepath.Join(dir, "data"), filepath.Join(dir, "shards")
	if err := synth.Generate(data, sc); err != nil {
		return "", err
	}
	ds, err := coco.Open(synth.AnnotationsPath(data, sc), synth.ImagesDir(data), coco.Options{})
	if err != nil {
		return "", err
	}
	w, err := shard.Create(shards, shard.WriterOptions{Categories: ds.Categories(), Source: shard.Source{Kind: "coco"}})
	if err != nil {
		return "", err
	}
	if err := ds.Images(context.Background(), 0, w.Write); err != nil {
		w.Abort()
		return "", fmt.Errorf("convert: %w", err)
	}
	if _, err := w.Close(nil); err != nil {
		return "", err
	}
	return shards, nil
}
