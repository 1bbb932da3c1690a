package model

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/testenv/torchbench"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// BenchmarkTrainStep times one train-mode forward and backward (gradient 1
// on every output) of variant n at SEGPIPE_BENCH_BATCH × 3 ×
// SEGPIPE_BENCH_IMGSZ² (default 8 × 640², the setting). With
// SEGPIPE_BENCH_TORCH=/usr/bin/python3 it also times testdata/bench_torch.py
// with GOMAXPROCS threads in the same run (glibc told to keep memory, PyTorch
// at its best) and reports torch-s/op and the ratio go/torch. model-GFLOP/s counts 3 × the forward's 2×MACs (forward,
// input gradient, weight gradient).
func BenchmarkTrainStep(b *testing.B) {
	batch, imgsz := torchbench.Size()
	m, err := New(Config{Variant: "n"})
	if err != nil {
		b.Fatal(err)
	}
	fl, _, err := m.CountFLOPs(imgsz, true)
	if err != nil {
		b.Fatal(err)
	}
	x := randomInput(1, batch, 3, imgsz, imgsz)
	var grads []*tensor.Tensor
	step := func() {
		for _, p := range m.Params() {
			p.Value.ZeroGrad()
		}
		tp := tensor.NewTape(nil)
		out, err := m.Forward(tp, x, Train)
		if err != nil {
			b.Fatal(err)
		}
		outs := []*tensor.Tensor{out.Proto, out.Semseg,
			out.One2Many.Boxes, out.One2Many.Scores, out.One2Many.MaskCoefficients,
			out.One2One.Boxes, out.One2One.Scores, out.One2One.MaskCoefficients}
		if grads == nil {
			for _, o := range outs {
				grads = append(grads, tensor.FullOn(cpu.Default(), 1, o.Shape...))
			}
		}
		tp.RecycleOutputs() // as the trainer does: activations feed the next step
		if err := tp.BackwardFrom(outs, grads); err != nil {
			b.Fatal(err)
		}
	}
	step() // warm the buffer pools
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		step()
	}
	b.StopTimer()
	perIter := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(3*fl.GFLOPs()*float64(batch)/perIter, "model-GFLOP/s")
	py := os.Getenv("SEGPIPE_BENCH_TORCH")
	if py == "" {
		return
	}
	res, err := torchbench.Run(torchbench.Config{Python: py, Script: "testdata/bench_torch.py", Variant: "n",
		Batch: batch, Imgsz: imgsz, Threads: runtime.GOMAXPROCS(0), Iters: b.N})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.SecPerIter, "torch-s/op")
	b.ReportMetric(perIter/res.SecPerIter, "go/torch")
}
