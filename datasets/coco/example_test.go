package coco_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// Converting a COCO instances file from Go, as `segpipe convert coco`
// does: Open parses the annotations and checks every image's header, and
// the shard writer takes the images one at a time. Skipped items are
// counted in the Report and recorded in the manifest.
func Example() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// A small COCO-format dataset to convert: annotations/instances_train.json
	// and its images.
	sc := synth.Config{Images: 10, Seed: 1, MaxSide: 160}
	if err := synth.Generate(filepath.Join(dir, "coco"), sc); err != nil {
		log.Fatal(err)
	}
	annotations := filepath.Join(dir, "coco", "annotations", "instances_train.json")
	images := synth.ImagesDir(filepath.Join(dir, "coco"))

	ds, err := coco.Open(annotations, images, coco.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := shard.Create(filepath.Join(dir, "shards"), shard.WriterOptions{
		Categories: ds.Categories(),
		Source:     shard.Source{Kind: "coco", Args: map[string]string{"annotations": annotations}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ds.Images(context.Background(), 0, w.Write); err != nil {
		w.Abort()
		log.Fatal(err)
	}
	m, err := w.Close(ds.Report().Counts())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rows:", m.Rows, "shards:", len(m.Shards), "categories:", len(m.Categories))
	// Output:
	// rows: 10 shards: 1 categories: 80
}
