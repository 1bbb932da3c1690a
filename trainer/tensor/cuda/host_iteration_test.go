package cuda_test

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segpipe/segpipe/trainer/internal/modelcase"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/loss/losscuda"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudastub"
)

// stubBackend opens a Backend on the stub driver (cudastub): the real
// bindings, argument packing and call sequence of every method, with
// libraries that return at once. It skips without a C compiler or in a
// build without the run-time binding.
func stubBackend(tb testing.TB) (*cuda.Backend, *cudastub.Stub) {
	tb.Helper()
	st := cudastub.Install(tb)
	cuda.ReopenLibraries()
	tb.Cleanup(cuda.ReopenLibraries)
	be, err := cuda.NewBackend(0, cuda.Options{})
	if err != nil {
		tb.Skipf("stub backend: %v", err)
	}
	tb.Cleanup(func() {
		if err := be.Close(); err != nil {
			tb.Error(err)
		}
	})
	return be, st
}

// nModelOn returns a fresh YOLO26n-seg on be.
func nModelOn(tb testing.TB, be *cuda.Backend) *model.Model {
	tb.Helper()
	m, err := model.New(model.Config{Variant: "n"})
	if err != nil {
		tb.Fatal(err)
	}
	m.To(be)
	return m
}

// hostIteration returns one training iteration of YOLO26n-seg on be as
// the train loop runs it: a train-mode forward of a batch of b images of
// sz px, the loss on the device with its result fetched and read one step
// late, backward from the loss's gradients, clipping, the MuSGD step,
// zeroing and the EMA update. The batch is uploaded once: its six staged
// copies are a fixed handful of calls, not what this measures.
func hostIteration(tb testing.TB, be *cuda.Backend, b, sz int) func() {
	tb.Helper()
	m, em := nModelOn(tb, be), nModelOn(tb, be)
	norm := map[string]bool{}
	for _, bn := range m.BatchNorms() {
		norm[bn.Prefix+".weight"] = true
	}
	var params []*optim.Param
	for _, p := range m.Params() {
		params = append(params, &optim.Param{Name: p.Name, Shape: p.Shape, Backend: be, Kernels: optim.TwinKernels(be),
			Value: p.Value.Buffer(), Gradient: p.Value.GradBuffer(), Norm: norm[p.Name]})
	}
	var state, avg []backend.Buffer
	for _, p := range m.State() {
		state = append(state, p.Value.Buffer())
	}
	for _, p := range em.State() {
		avg = append(avg, p.Value.Buffer())
	}
	groups, err := optim.BuildGroups(params, optim.GroupConfig{LR: 0.01, Momentum: 0.9, WeightDecay: 5e-4, Muon: true})
	if err != nil {
		tb.Fatal(err)
	}
	opt := optim.NewMuSGD(groups, 0.5, 0.5)
	ema, err := optim.NewEMAOn(be, optim.TwinKernels(be), avg, state)
	if err != nil {
		tb.Fatal(err)
	}
	crit, err := loss.NewCriterion(loss.DefaultConfig(1))
	if err != nil {
		tb.Fatal(err)
	}
	img, tg := modelcase.SyntheticBatch(b, sz)
	x := tensor.UploadBytes(be, img, 1.0/255, b, 3, sz, sz)
	var dt loss.DeviceTargets
	dt.Upload(be, tg)
	res := be.Alloc(loss.ResultLen)
	tp := tensor.NewTape(be)
	var seeds []*tensor.Tensor
	var pending backend.Fetched
	return func() {
		mo, err := m.Forward(tp, x, model.Train)
		if err != nil {
			tb.Fatal(err)
		}
		outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
			mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
		if seeds == nil {
			for _, o := range outs {
				seeds = append(seeds, tensor.ZerosOn(be, o.Shape...))
			}
		}
		var ob, gb [loss.NumOutputs]backend.Buffer
		for i, o := range outs {
			ob[i], gb[i] = o.Buffer(), seeds[i].Buffer()
		}
		geo := loss.Geometry{B: mo.Proto.Shape[0], NC: m.Config.Classes, NM: mo.Proto.Shape[1],
			ProtoH: mo.Proto.Shape[2], ProtoW: mo.Proto.Shape[3], SemH: mo.Semseg.Shape[2], SemW: mo.Semseg.Shape[3]}
		for i, f := range mo.Feats {
			geo.Levels = append(geo.Levels, loss.Level{H: f.Shape[2], W: f.Shape[3], Stride: float32(model.Strides[i])})
		}
		if err := crit.ForwardOn(loss.OnDevice(be, losscuda.New(be)), geo, ob, gb, &dt, res); err != nil {
			tb.Fatal(err)
		}
		f, err := be.Fetch(res.Slice(0, loss.ResultLen))
		if err != nil {
			tb.Fatal(err)
		}
		tp.RecycleOutputs()
		if err := tp.BackwardFrom(outs, seeds); err != nil {
			tb.Fatal(err)
		}
		optim.ClipGrads(params, 10)
		opt.Step()
		optim.ZeroGrad(params)
		if err := ema.UpdateOn(state); err != nil {
			tb.Fatal(err)
		}
		// The step's one wait: the previous step's loss, long copied.
		if pending != nil {
			var w [loss.ResultLen]float32
			if err := pending.Wait(w[:]); err != nil {
				tb.Fatal(err)
			}
		}
		pending = f
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHostIteration is the host's side of one YOLO26n-seg training
// iteration at batch 32 and 640 px on the CUDA backend over the stub
// driver: everything the backend does on the host to queue the step —
// Go code, argument packing, purego calls, thread hand-offs — and nothing
// a GPU or the real libraries would add. host-ms/iter is wall time,
// cpu-ms/iter the process's CPU time (every thread, the collector
// included), calls/iter the calls into libcuda, cuBLAS and cuDNN, and
// µs/call host-ms/iter over calls/iter, and peak-GB the most device memory
// the backend's buffers held at once (Backend.Held: a step's tensors, and
// dropped ones until the collector returns them). SEGPIPE_HOST_BATCH and
// SEGPIPE_HOST_IMGSZ change the size.
func BenchmarkHostIteration(b *testing.B) {
	be, st := stubBackend(b)
	batch, imgsz := envInt("SEGPIPE_HOST_BATCH", 32), envInt("SEGPIPE_HOST_IMGSZ", 640)
	step := hostIteration(b, be, batch, imgsz)
	step() // plans the convolutions and fills the caches
	step()
	runtime.GC()
	c0, err := st.Calls()
	if err != nil {
		b.Fatal(err)
	}
	by0, _ := st.CallsByName()
	runtime.GC()
	be.ResetHeldPeak()
	cpu0 := cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		step()
	}
	wall := time.Since(t0)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	c1, _ := st.Calls()
	by1, _ := st.CallsByName()
	n := float64(b.N)
	b.Logf("calls an iteration by entry point: %s", perName(by0, by1, b.N))
	calls := float64(c1-c0) / n
	b.ReportMetric(wall.Seconds()*1e3/n, "host-ms/iter")
	b.ReportMetric(cpu.Seconds()*1e3/n, "cpu-ms/iter")
	b.ReportMetric(calls, "calls/iter")
	b.ReportMetric(wall.Seconds()*1e6/n/max(calls, 1), "µs/call")
	_, peak := be.Held()
	b.ReportMetric(float64(peak)/1e9, "peak-GB")
}

func envInt(name string, def int) int {
	var v int
	if s := os.Getenv(name); s != "" {
		if _, err := fmt.Sscan(s, &v); err == nil && v > 0 {
			return v
		}
	}
	return def
}

// perName formats the calls between two counts by entry point, most
// first.
func perName(before, after map[string]uint64, iters int) string {
	type kv struct {
		name string
		n    uint64
	}
	var all []kv
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			all = append(all, kv{k, d})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var sb strings.Builder
	for _, e := range all {
		fmt.Fprintf(&sb, "%s %.0f, ", e.name, float64(e.n)/float64(iters))
	}
	return strings.TrimSuffix(sb.String(), ", ")
}

// callBudget is the most calls into libcuda, cuBLAS and cuDNN one
// training iteration of YOLO26n-seg may make (every one of them a
// host-side cost before the GPU sees the work), measured on the stub
// driver; see TestHostCallBudget. 3.8k today (4.0k with a launch per
// Muon parameter for its momentum and its update, 4.7k with batch-norm's
// running update in launches of its own and the gradients of concat,
// split and reshape zero-filled before they are added to, 5.7k with SiLU apart from batch-norm, 9.3k with MuSGD's
// Newton–Schulz matrix by matrix), so undoing the fused batch-norm, its
// running update or the batched Newton–Schulz fails it.
const callBudget = 4500

// TestHostCallBudget holds the calls of one training iteration (forward,
// loss, backward, clipping, MuSGD, zeroing, EMA; batch 2 at 64 px, a
// tenth fewer calls than at batch 32 and 640 px, whose count
// BenchmarkHostIteration reports) under callBudget, as
// TestTransferBudgetPerIteration in trainer/train holds its crossings, and
// checks that the iteration's only wait for the device is the previous
// step's loss (one cuEventSynchronize, no stream or context
// synchronisation).
func TestHostCallBudget(t *testing.T) {
	be, st := stubBackend(t)
	step := hostIteration(t, be, 2, 64)
	step()
	step()
	c0, err := st.Calls()
	if err != nil {
		t.Fatal(err)
	}
	by0, _ := st.CallsByName()
	// Buffers are freed by the collector's cleanups, which land in
	// whichever step runs when they do: the figure is a mean over steps.
	const steps = 4
	for range steps {
		step()
	}
	c1, _ := st.Calls()
	by1, _ := st.CallsByName()
	got := (c1 - c0) / steps
	t.Logf("%d calls an iteration: %s", got, perName(by0, by1, steps))
	if got > callBudget {
		t.Errorf("an iteration makes %d calls into the CUDA libraries, budget %d", got, callBudget)
	}
	for _, wait := range []string{"cuStreamSynchronize", "cuCtxSynchronize"} {
		if n := by1[wait] - by0[wait]; n != 0 {
			t.Errorf("%d iterations wait for the device %d times with %s; want only the loss's event", steps, n, wait)
		}
	}
	if n := by1["cuEventSynchronize"] - by0["cuEventSynchronize"]; n != steps {
		t.Errorf("%d iterations make %d cuEventSynchronize calls, want one each (the previous step's loss)", steps, n)
	}
}

// TestTimerOnStub: a device timer adds to a step two timing events
// recorded on the compute stream around it, one wait (for the end event),
// one elapsed-time query and the two events' destruction; nothing else.
func TestTimerOnStub(t *testing.T) {
	be, st := stubBackend(t)
	step := hostIteration(t, be, 2, 64)
	step()
	step()
	calls := func(f func()) map[string]uint64 {
		by0, err := st.CallsByName()
		if err != nil {
			t.Fatal(err)
		}
		f()
		by1, _ := st.CallsByName()
		d := map[string]uint64{}
		for k, v := range by1 {
			if n := v - by0[k]; n != 0 && strings.HasPrefix(k, "cuEvent") {
				d[k] = n
			}
		}
		return d
	}
	plain := calls(step)
	timed := calls(func() {
		tm, err := be.StartTimer()
		if err != nil {
			t.Fatal(err)
		}
		step()
		if _, err := tm.Stop(); err != nil {
			t.Fatal(err)
		}
	})
	want := map[string]uint64{"cuEventCreate": 2, "cuEventRecord": 2, "cuEventSynchronize": 1, "cuEventElapsedTime": 1, "cuEventDestroy_v2": 2}
	for name, n := range want {
		if got := timed[name] - plain[name]; got != n {
			t.Errorf("%s: %d calls with the timer, %d without; want %d more", name, timed[name], plain[name], n)
		}
	}
}
