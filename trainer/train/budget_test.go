package train

import (
	"context"
	"testing"

	fbatch "github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The host↔device crossings of one training iteration on the emulated
// device, counted by the backend. The loss, clipping, the optimiser step,
// zeroing and the EMA run on the backend, so every iteration — with an
// optimiser step or without — moves only the batch up (the images as
// uint8, boxes as float32, classes and boxes_per_image as int32, iscrowd
// and the mask stack as the loader's bytes: six calls) and the loss items
// and total down (one call of loss.ResultLen floats): a fixed number of
// calls whatever the batch size, the instance count or the model's size,
// and exactly those bytes (nothing else in the step crosses).
func TestTransferBudgetPerIteration(t *testing.T) {
	shards, _, _ := synthShards(t, 8)
	src, cats := open(t, shards)
	for _, batch := range []int{2, 4} {
		cfg := tinyConfig(1)
		cfg.Device, cfg.Batch, cfg.NBS = "emu", batch, 2*batch // optimiser every 2nd iteration
		tr := &trainer{opt: Options{Config: cfg, Train: Local(src), Categories: cats, Out: t.TempDir()}, log: discardLogger()}
		if err := tr.setup(); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ld, err := pipeline.New(ctx, pipeline.Repeat(src, 4), pipeline.Config{BatchSize: batch, Augment: defaultAugFrom(cfg), Epochs: 1})
		if err != nil {
			t.Fatal(err)
		}
		tp := tensor.NewTape(tr.be)
		var gs gradSet
		var ep Epoch
		// step runs one iteration and returns its crossings and the bytes
		// its batch has: images, and each of the five target arrays.
		step := func() (backend.Transfers, [6]int64) {
			t.Helper()
			rec, err := ld.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			in, err := fbatch.InstancesOf(rec)
			if err != nil {
				t.Fatal(err)
			}
			n := int64(len(in.Classes))
			sizes := [6]int64{rec.NumRows() * int64(3*cfg.Imgsz*cfg.Imgsz), // uint8
				4 * int64(len(in.BoxesPerImage)), 4 * n, 16 * n, int64(len(in.IsCrowd)), int64(len(in.Masks))}
			if int64(len(in.Masks)) != n*int64(cfg.Imgsz/4*cfg.Imgsz/4) || int64(len(in.Boxes)) != 4*n {
				t.Fatalf("batch of %d instances has %d mask bytes and %d box values", n, len(in.Masks), len(in.Boxes))
			}
			t0 := tr.be.Transfers()
			if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
				t.Fatal(err)
			}
			tr.st.NI++
			t1 := tr.be.Transfers()
			return backend.Transfers{Uploads: t1.Uploads - t0.Uploads, Downloads: t1.Downloads - t0.Downloads,
				UploadBytes: t1.UploadBytes - t0.UploadBytes, DownloadBytes: t1.DownloadBytes - t0.DownloadBytes,
				Syncs: t1.Syncs - t0.Syncs}, sizes
		}
		first, firstSizes := step()
		second, secondSizes := step()
		ld.Close()
		// Iteration 0 always steps, so one of the two was an optimiser
		// iteration; both must cross exactly the batch and the result.
		if tr.acc.Last() < 0 {
			t.Fatalf("batch %d: no optimiser step in the first two iterations", batch)
		}
		for i, it := range []struct {
			got   backend.Transfers
			sizes [6]int64
		}{{first, firstSizes}, {second, secondSizes}} {
			var batchBytes int64
			for _, b := range it.sizes {
				batchBytes += b
			}
			acc := it.got
			if acc.Uploads != 6 || acc.UploadBytes != batchBytes || acc.Downloads != 1 || acc.DownloadBytes != 4*loss.ResultLen {
				t.Errorf("batch %d iteration %d: %+v; want 6 uploads of %d bytes (images, boxes_per_image, classes, boxes, iscrowd, masks: %v), 1 download of %d",
					batch, i, acc, batchBytes, it.sizes, 4*loss.ResultLen)
			}
		}
		acc, sizes := first, firstSizes
		t.Logf("batch %d at %d px: an iteration (with or without an optimiser step) up %d calls / %d B (images %d B as uint8, boxes_per_image %d B, classes %d B, boxes %d B, iscrowd %d B, masks %d B as uint8), down %d calls / %d B; syncs %d",
			batch, cfg.Imgsz, acc.Uploads, acc.UploadBytes, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], acc.Downloads, acc.DownloadBytes, acc.Syncs)
	}
}
