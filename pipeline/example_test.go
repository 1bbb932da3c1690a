package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// A Go program embedding the loader: open a shard set, stream an epoch of
// batches, and give every buffer back. Config.Allocator decides where batch
// memory comes from (here a checked allocator, which counts what is
// outstanding; memory.NewCgoArrowAllocator or mallocator for memory that C
// code may keep, as the Python package's shared library does).
func Example_embed() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	shards := writeSynthShards(dir, 16)

	src, err := pipeline.OpenShards(shards)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	cfg := pipeline.Config{BatchSize: 4, Workers: 2, Start: order.State{Seed: 1}, Augment: aug, Allocator: mem}
	l, err := pipeline.New(context.Background(), src, cfg)
	if err != nil {
		log.Fatal(err)
	}
	images := 0
	for {
		rec, err := l.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if _, err := batch.MaskStack(rec); err != nil { // (sum_N, 32, 32) of {0, 1}
			log.Fatal(err)
		}
		images += int(rec.NumRows())
		rec.Release()
	}
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("images in the epoch:", images)
	fmt.Println("bytes outstanding:", mem.CurrentAlloc())
	// Output:
	// images in the epoch: 16
	// bytes outstanding: 0
}

// writeSynthShards converts n synthetic COCO images into a shard set under
// dir, as `segpipe synth` and `segpipe convert coco` would.
func writeSynthShards(dir string, n int) string {
	sc := synth.Config{Images: n, Seed: 1, MaxSide: 160}
	data, shards := filepath.Join(dir, "data"), filepath.Join(dir, "shards")
	if err := synth.Generate(data, sc); err != nil {
		log.Fatal(err)
	}
	ds, err := coco.Open(synth.AnnotationsPath(data, sc), synth.ImagesDir(data), coco.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := shard.Create(shards, shard.WriterOptions{Categories: ds.Categories(), Source: shard.Source{Kind: "coco"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := ds.Images(context.Background(), 0, w.Write); err != nil {
		log.Fatal(err)
	}
	if _, err := w.Close(nil); err != nil {
		log.Fatal(err)
	}
	return shards
}
