package train

import (
	"context"
	"testing"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The host↔device crossings of one training iteration on the emulated
// device, counted by the backend. With the loss and the optimiser still on
// the host, an accumulation iteration moves: up, the images as uint8 (one
// call) and the eight output gradients of the loss; down, the eight outputs — a fixed
// number of calls whatever the batch size or the instance count, and
// exactly those bytes (nothing else in the step crosses). An optimiser
// iteration crosses exactly what an accumulation iteration does, whatever
// the model's size: clipping, the step, zeroing and the EMA run on the
// backend's buffers. The target (the batch up, a few scalars
// down) needs the loss on the backend too.
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
		step := func() (backend.Transfers, int) {
			t.Helper()
			rec, err := ld.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			t0 := tr.be.Transfers()
			if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
				t.Fatal(err)
			}
			tr.st.NI++
			t1 := tr.be.Transfers()
			return backend.Transfers{Uploads: t1.Uploads - t0.Uploads, Downloads: t1.Downloads - t0.Downloads,
				UploadBytes: t1.UploadBytes - t0.UploadBytes, DownloadBytes: t1.DownloadBytes - t0.DownloadBytes,
				Syncs: t1.Syncs - t0.Syncs}, int(rec.NumRows())
		}
		acc, n := step()
		opt, _ := step()
		if opt.Uploads < acc.Uploads { // which of the two stepped depends on the schedule's start
			acc, opt = opt, acc
		}
		ld.Close()

		in3 := int64(n * 3 * cfg.Imgsz * cfg.Imgsz) // uint8
		var outs int64
		for _, g := range [][]float32{gs.grads.One2Many.Boxes, gs.grads.One2Many.Scores, gs.grads.One2Many.Coef,
			gs.grads.One2One.Boxes, gs.grads.One2One.Scores, gs.grads.One2One.Coef, gs.grads.Proto, gs.grads.Semseg} {
			outs += int64(4 * len(g))
		}
		if acc.Uploads != 9 || acc.Downloads != 8 || acc.UploadBytes != in3+outs || acc.DownloadBytes != outs {
			t.Errorf("batch %d accumulation iteration: %+v; want 9 uploads of %d bytes, 8 downloads of %d", batch, acc, in3+outs, outs)
		}
		// Iteration 0 always steps, so one of the two was an optimiser
		// iteration; it must cross exactly what the other did.
		if tr.acc.Last() < 0 {
			t.Fatalf("batch %d: no optimiser step in the first two iterations", batch)
		}
		if opt != acc {
			t.Errorf("batch %d optimiser iteration: %+v, want the accumulation iteration's %+v", batch, opt, acc)
		}
		t.Logf("batch %d at %d px: accumulation iteration up %d calls / %d B (images %d B as uint8, loss gradients %d B), down %d calls / %d B; optimiser iteration adds up %d calls / %d B, down %d calls / %d B; syncs %d",
			batch, cfg.Imgsz, acc.Uploads, acc.UploadBytes, in3, outs, acc.Downloads, acc.DownloadBytes,
			opt.Uploads-acc.Uploads, opt.UploadBytes-acc.UploadBytes, opt.Downloads-acc.Downloads, opt.DownloadBytes-acc.DownloadBytes, acc.Syncs)
	}
}
