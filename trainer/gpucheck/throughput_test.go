package gpucheck

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/testenv/torchbench"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

// BenchmarkTrainStepOnGPU times the training step of variant n on GPU 0 —
// one train-mode forward and backward with gradient 1 on every output,
// the step trainer/model's BenchmarkTrainStep times on the CPU — at
// SEGPIPE_BENCH_IMGSZ (default 640), batch 32 and 16, TF32 off and on.
// Each step ends with a synchronisation, and the figure is the best of
// max(b.N, 5) steps after two warm-up steps (the first plans the
// convolutions); run it with -test.benchtime=1x. With
// SEGPIPE_BENCH_TORCH naming a Python with PyTorch, the same step of the
// project's PyTorch model (trainer/model/testdata/bench_torch.py, eager,
// cuDNN benchmarking) runs on the same GPU in the same run, and
// go/torch is the ratio of the two best steps (below 1: segpipe faster).
func BenchmarkTrainStepOnGPU(b *testing.B) {
	_, imgsz := torchbench.Size()
	for _, batch := range []int{32, 16} {
		for _, tf32 := range []bool{false, true} {
			name := fmt.Sprintf("batch=%d/fp32", batch)
			if tf32 {
				name = fmt.Sprintf("batch=%d/tf32", batch)
			}
			b.Run(name, func(b *testing.B) { benchStep(b, batch, imgsz, tf32) })
		}
	}
}

func benchStep(b *testing.B, batch, imgsz int, tf32 bool) {
	be, err := cuda.NewBackend(0, cuda.Options{TF32: tf32})
	if errors.Is(err, cuda.ErrUnavailable) {
		b.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	open := true
	defer func() {
		if open {
			be.Close()
		}
	}()
	m, err := model.New(model.Config{Variant: "n"})
	if err != nil {
		b.Fatal(err)
	}
	m.To(be)
	rng := rand.New(rand.NewPCG(1, uint64(batch)))
	px := make([]float32, batch*3*imgsz*imgsz)
	for i := range px {
		px[i] = rng.Float32()
	}
	x := tensor.Upload(be, px, batch, 3, imgsz, imgsz)
	queue := trainStep(b, be, m, x)
	queue()
	be.Sync()
	queue()
	be.Sync()
	x0 := be.Transfers()
	be.ResetHeldPeak()
	b.ResetTimer()
	// Per step: the wall time; the host's time to queue the step (until
	// its last call returns); the device's time between events recorded
	// before and after it. Host time near the wall time and device time
	// well below it is a host-bound step.
	never := time.Duration(1<<63 - 1)
	best, bestHost, bestDevice := never, never, never
	steps := max(b.N, 5) // -test.benchtime=1x: one run of the benchmark, five steps
	for range steps {
		t0 := time.Now()
		tm, err := be.StartTimer()
		if err != nil {
			b.Fatal(err)
		}
		queue()
		host := time.Since(t0)
		device, err := tm.Stop()
		if err != nil {
			b.Fatal(err)
		}
		best, bestHost, bestDevice = min(best, time.Since(t0)), min(bestHost, host), min(bestDevice, device)
	}
	b.StopTimer()
	sec := best.Seconds()
	moved := x0.Since(be.Transfers())
	b.ReportMetric(sec, "best-s/step")
	b.ReportMetric(float64(batch)/sec, "img/s")
	b.ReportMetric(bestHost.Seconds()*1e3, "host-queue-ms/step")
	b.ReportMetric(bestDevice.Seconds()*1e3, "device-ms/step")
	b.ReportMetric(float64(moved.UploadBytes+moved.DownloadBytes)/float64(steps), "host-device-B/step")
	_, peak := be.Held()
	b.ReportMetric(float64(peak)/1e9, "buffers-peak-GB")
	py := os.Getenv("SEGPIPE_BENCH_TORCH")
	if py == "" {
		return
	}
	open = false
	if err := be.Close(); err != nil { // the GPU's memory to PyTorch
		b.Fatal(err)
	}
	res, err := torchbench.Run(torchbench.Config{Python: py, Script: "../../model/testdata/bench_torch.py", Variant: "n",
		Batch: batch, Imgsz: imgsz, Threads: runtime.GOMAXPROCS(0), Iters: steps, CUDA: true, TF32: tf32})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.SecPerIter, "torch-best-s/step")
	b.ReportMetric(sec/res.SecPerIter, "go/torch")
}

// trainStep returns the benchmarked step on be: zeroed gradients, a
// train-mode forward of x and backward from gradient 1 on every output,
// queued; the caller waits for it (Sync or a Timer).
func trainStep(tb testing.TB, be backend.Backend, m *model.Model, x *tensor.Tensor) func() {
	var seeds []*tensor.Tensor
	return func() {
		for _, p := range m.Params() {
			p.Value.ZeroGrad()
		}
		tp := tensor.NewTape(be)
		out, err := m.Forward(tp, x, model.Train)
		if err != nil {
			tb.Fatal(err)
		}
		outs := []*tensor.Tensor{out.Proto, out.Semseg,
			out.One2Many.Boxes, out.One2Many.Scores, out.One2Many.MaskCoefficients,
			out.One2One.Boxes, out.One2One.Scores, out.One2One.MaskCoefficients}
		if seeds == nil {
			for _, o := range outs {
				s := tensor.ZerosOn(be, o.Shape...)
				be.Fill(s.Buffer(), 1)
				seeds = append(seeds, s)
			}
		}
		tp.RecycleOutputs()
		if err := tp.BackwardFrom(outs, seeds); err != nil {
			tb.Fatal(err)
		}
	}
}
