package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/testenv/exampledata"
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
	shards, err := exampledata.Shards(dir, n, 160)
	if err != nil {
		log.Fatal(err)
	}
	return shards
}

// Resuming: a loader's State after a batch, saved (here as JSON, as a
// checkpoint would hold it), starts a new loader that delivers exactly the
// batches the first would have delivered next.
func Example_resume() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src, err := pipeline.OpenShards(writeSynthShards(dir, 12))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 64
	cfg := pipeline.Config{BatchSize: 4, Workers: 2, Start: order.State{Seed: 7}, Augment: aug}

	// ids streams the loader's remaining batches of the epoch, stopping
	// after stop batches when stop > 0, and returns their image ids and
	// the state after the last.
	ids := func(cfg pipeline.Config, stop int) ([]int64, order.State) {
		l, err := pipeline.New(context.Background(), src, cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		var out []int64
		for n := 0; stop == 0 || n < stop; n++ {
			rec, err := l.Next(context.Background())
			if err == io.EOF {
				break
			}
			if err != nil {
				log.Fatal(err)
			}
			imgs, err := batch.ImagesOf(rec)
			if err != nil {
				log.Fatal(err)
			}
			for _, im := range imgs {
				out = append(out, im.ID)
			}
			rec.Release()
		}
		return out, l.State()
	}
	whole, _ := ids(cfg, 0)
	first, state := ids(cfg, 1)
	saved, _ := json.Marshal(state)

	var restored order.State
	if err := json.Unmarshal(saved, &restored); err != nil {
		log.Fatal(err)
	}
	cfg.Start = restored
	rest, _ := ids(cfg, 0)
	fmt.Println("saved state:", string(saved))
	fmt.Println("resumed run delivers the same batches:", slices.Equal(whole, append(first, rest...)))
	// Output:
	// saved state: {"seed":7,"epoch":0,"consumed":4}
	// resumed run delivers the same batches: true
}

// A shard set in a bucket is opened by its URL; credentials and region
// come from the environment, as the cloud's own tools take them (for S3:
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; an S3-compatible
// server is named with ?endpoint=...&use_path_style=true). Everything
// after OpenShards is the same as for a local directory.
func ExampleOpenShards_bucket() {
	src, err := pipeline.OpenShards("s3://my-bucket/coco/train")
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	fmt.Println("images:", src.Manifest().Rows)
}
