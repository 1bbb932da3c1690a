package train

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/testenv/torchbench"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// BenchmarkTrainIteration measures CPU training throughput (forward, loss,
// backward, plus the optimiser step amortised over the accumulation) at
// SEGPIPE_BENCH_IMGSZ (640) and SEGPIPE_BENCH_BATCH (8) with the default
// augmentation, next to the loader's own throughput on the same data in
// the same run (the baseline the trainer must not wait for). With
// SEGPIPE_BENCH_TORCH=/usr/bin/python3 it also times PyTorch's step of the
// same model in the same run and reports go/torch (per image; below 1 is
// faster than PyTorch).
func BenchmarkTrainIteration(b *testing.B) {
	batchSize, imgsz := torchbench.Size()
	shards := benchShards(b, 16)
	src, err := pipeline.OpenShards(shards)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	cfg := DefaultConfig()
	cfg.Imgsz, cfg.Batch, cfg.Epochs = imgsz, batchSize, 1000
	ctx := context.Background()

	// Baseline: the loader alone, same configuration.
	ld, err := pipeline.New(ctx, pipeline.Repeat(src, 4), pipeline.Config{BatchSize: batchSize, Augment: defaultAugFrom(cfg), Epochs: 1})
	if err != nil {
		b.Fatal(err)
	}
	for {
		rec, err := ld.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	ls := ld.Stats()
	ld.Close()

	tr := &trainer{opt: Options{Config: cfg, Train: Local(src), Categories: src.Manifest().Categories, Out: b.TempDir()}}
	tr.log = discardLogger()
	if err := tr.setup(); err != nil {
		b.Fatal(err)
	}
	ld, err = pipeline.New(ctx, pipeline.Repeat(src, 1000), pipeline.Config{BatchSize: batchSize, Augment: defaultAugFrom(cfg), Epochs: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer ld.Close()
	tp := tensor.NewTape(nil)
	var gs gradSet
	var ep Epoch
	tr.st.NI = 1 // past iteration 0's step: measure accumulation iterations
	// One warm-up iteration: the loader's first batch and the first
	// allocation of every buffer are not the steady state.
	rec, err := ld.Next(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
		b.Fatal(err)
	}
	rec.Release()
	b.ResetTimer()
	stall0 := ld.Stats().Stall
	start := time.Now()
	for i := 0; i < b.N; i++ {
		rec, err := ld.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
			b.Fatal(err)
		}
		rec.Release()
		tr.st.NI++
	}
	iter := time.Since(start) / time.Duration(b.N)
	stall := (ld.Stats().Stall - stall0) / time.Duration(b.N)
	b.StopTimer()
	s0 := time.Now()
	tr.opt_.Step()
	stepT := time.Since(s0)
	acc := max(1, (cfg.NBS+batchSize/2)/batchSize)
	perImage := (iter + stepT/time.Duration(acc)).Seconds() / float64(batchSize)
	b.ReportMetric(1/perImage, "train-img/s")
	b.ReportMetric(ls.ImagesPerSec, "loader-img/s")
	b.ReportMetric(ls.ImagesPerSec*perImage, "loader/train")
	b.ReportMetric(iter.Seconds(), "iter-s")
	b.ReportMetric(stepT.Seconds(), "optstep-s")
	b.ReportMetric(stall.Seconds(), "stall-s/iter")
	py := os.Getenv("SEGPIPE_BENCH_TORCH")
	if py == "" {
		return
	}
	// The same model's PyTorch step in the same run: forward + backward of
	// the trainer-foundation benchmark plus a MuSGD-style step amortised
	// over the same accumulation. It has no loss, so the ratio is
	// conservative by the loss's share of segpipe's iteration.
	res, err := torchbench.Run(torchbench.Config{Python: py, Script: "../model/testdata/bench_torch.py", Variant: cfg.Variant,
		Batch: batchSize, Imgsz: imgsz, Threads: runtime.GOMAXPROCS(0), Iters: b.N, OptStep: true,
		DefaultMalloc: os.Getenv("SEGPIPE_BENCH_TORCH_DEFAULT_MALLOC") != ""})
	if err != nil {
		b.Fatal(err)
	}
	torchPerImage := (res.SecPerIter + res.OptStepSec/float64(acc)) / float64(batchSize)
	b.ReportMetric(1/torchPerImage, "torch-train-img/s")
	b.ReportMetric(res.SecPerIter, "torch-iter-s")
	b.ReportMetric(res.OptStepSec, "torch-optstep-s")
	b.ReportMetric(perImage/torchPerImage, "go/torch")
}
