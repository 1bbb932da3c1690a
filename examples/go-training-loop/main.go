// Command go-training-loop streams segpipe batches into a Go training
// loop: the shape of a program that embeds the loader instead of running
// `segpipe serve`. Each batch is an Arrow record whose image tensor,
// boxes, classes and {0,1} masks are read in place through formats/batch;
// step stands for the model's forward and backward. The loader's state is
// saved after every batch, and a run started again with the same
// -checkpoint continues where the last one stopped.
//
//	go run ./examples/go-training-loop -shards shards/train -epochs 2
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

func main() {
	shards := flag.String("shards", "", "shard set: a directory or bucket URL written by `segpipe convert`")
	epochs := flag.Int("epochs", 2, "epochs to train")
	batchSize := flag.Int("batch", 8, "images per batch")
	imgsz := flag.Int("imgsz", 320, "input canvas side in pixels (a multiple of 32)")
	seed := flag.Uint64("seed", 0, "shuffle and augmentation seed")
	checkpoint := flag.String("checkpoint", "", "file that holds the loader state between runs (none: start at epoch 0)")
	flag.Parse()
	if *shards == "" {
		fmt.Fprintln(os.Stderr, "go-training-loop: -shards is required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *shards, *epochs, *batchSize, *imgsz, *seed, *checkpoint); err != nil {
		slog.Error("training stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, shards string, epochs, batchSize, imgsz int, seed uint64, checkpoint string) error {
	src, err := pipeline.OpenShards(shards)
	if err != nil {
		return err
	}
	defer src.Close()
	start, err := load(checkpoint, seed)
	if err != nil {
		return err
	}
	aug := augment.DefaultConfig()
	aug.ImgSz = imgsz
	for start.Epoch < epochs {
		cfg := pipeline.Config{BatchSize: batchSize, Start: start, Augment: aug}
		// The loader's workers decode, augment and rasterise ahead of the
		// step; Next hands over the next finished batch.
		l, err := pipeline.New(ctx, src, cfg)
		if err != nil {
			return err
		}
		t0, images, instances := time.Now(), 0, 0
		for {
			rec, err := l.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				l.Close()
				return err
			}
			n, err := step(rec)
			images += int(rec.NumRows())
			instances += n
			rec.Release() // the batch's buffers go back to the loader's pool
			if err != nil {
				l.Close()
				return err
			}
			if err := save(checkpoint, l.State()); err != nil {
				l.Close()
				return err
			}
		}
		var skipped int64
		for _, n := range l.Stats().Skipped {
			skipped += n
		}
		if err := l.Close(); err != nil {
			return err
		}
		fmt.Printf("epoch %d: %d images, %d instances, %.0f images/s, %d skipped\n",
			start.Epoch, images, instances, float64(images)/time.Since(t0).Seconds(), skipped)
		start = order.State{Seed: start.Seed, Epoch: start.Epoch + 1}
		if err := save(checkpoint, start); err != nil {
			return err
		}
	}
	return nil
}

// step stands for a training step: it reads the batch's tensors where
// they lie (no copy) and checks what a loss would rely on. It returns the
// batch's instance count.
func step(rec arrow.RecordBatch) (int, error) {
	images, err := batch.ImageTensor(rec) // (B, 3, H, W) uint8
	if err != nil {
		return 0, err
	}
	in, err := batch.InstancesOf(rec) // boxes, classes, masks by image
	if err != nil {
		return 0, err
	}
	masks, err := batch.MaskStack(rec) // (sum_N, H/4, W/4) of {0, 1}
	if err != nil {
		return 0, err
	}
	if images.Count != len(in.BoxesPerImage) || masks.Count != len(in.Classes) {
		return 0, fmt.Errorf("batch of %d images has %d box counts and %d masks for %d instances",
			images.Count, len(in.BoxesPerImage), masks.Count, len(in.Classes))
	}
	return len(in.Classes), nil
}

// load reads the saved loader state, or starts at epoch 0 of seed.
func load(path string, seed uint64) (order.State, error) {
	start := order.State{Seed: seed}
	if path == "" {
		return start, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return start, nil
	}
	if err != nil {
		return start, err
	}
	if err := json.Unmarshal(b, &start); err != nil {
		return start, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	fmt.Printf("resuming at epoch %d after %d images\n", start.Epoch, start.Consumed)
	return start, nil
}

// save writes the loader state beside where a trainer writes its weights;
// a rename makes the write whole or absent.
func save(path string, s order.State) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
