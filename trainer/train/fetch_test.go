package train

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// fetchingEmu is the emulated device with a backend.Fetcher: the contract
// the CUDA backend implements with a copy into pinned memory behind the
// queued work. emu runs kernels as they are queued, so Fetch takes the
// values at once, as the device's copy would see them; what the test
// watches is when they are read: a read counts as late when the host
// queued the next batch's upload between the fetch and the read, which is
// what keeps a GPU from idling on it.
type fetchingEmu struct {
	*cpu.Backend
	t                     *testing.T
	uploads               int
	fetches, reads, lates int
}

func (f *fetchingEmu) UploadBytes(dst backend.Buffer, src []byte) {
	f.uploads++
	f.Backend.UploadBytes(dst, src)
}

func (f *fetchingEmu) Fetch(src backend.Buffer) (backend.Fetched, error) {
	v := make([]float32, src.Len)
	f.Download(v, src)
	f.fetches++
	return &emuFetched{f: f, v: v, uploads: f.uploads}, nil
}

type emuFetched struct {
	f       *fetchingEmu
	v       []float32
	uploads int
	read    bool
}

func (e *emuFetched) Wait(dst []float32) error {
	if e.read {
		e.f.t.Error("a fetched result read twice")
	}
	e.read = true
	e.f.reads++
	if e.f.uploads > e.uploads {
		e.f.lates++
	}
	copy(dst, e.v)
	return nil
}

// TestDeferredLossReadsLikeDownload: on a backend.Fetcher the step reads
// its loss once the next step is queued, and the run — saves every two
// iterations, an interruption mid-epoch and its resume, two epochs — ends
// with the weights, state and loss curve of a run on emu that reads each
// loss at once, bit for bit; every fetch is read once, and every read but
// the last of each epoch and those before a save or the interruption is
// late.
func TestDeferredLossReadsLikeDownload(t *testing.T) {
	shards, _, _ := synthShards(t, 8)
	src, cats := open(t, shards)
	cfg := tinyConfig(2)
	cfg.Device, cfg.Batch, cfg.NBS, cfg.SaveEvery = "emu", 2, 4, 3 // 4 batches an epoch
	a, b := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: a}); err != nil {
		t.Fatal(err)
	}
	fe := &fetchingEmu{Backend: cpu.NewEmulated(), t: t}
	_, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: b, Backend: deviceOf(fe), StopAfterIterations: 2})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("split run: %v, want ErrInterrupted", err)
	}
	if _, err := Run(context.Background(), Options{Train: Local(src), Out: b, Resume: true, Backend: deviceOf(fe)}); err != nil {
		t.Fatal(err)
	}
	sameRun(t, a, b)
	// 8 iterations; a read not late: the interruption's (after 2), the
	// saves' (after 3 and 6), each epoch's last (4 and 8).
	if fe.fetches != 8 || fe.reads != 8 || fe.lates != 8-5 {
		t.Errorf("%d fetches, %d reads, %d late; want 8, 8, 3", fe.fetches, fe.reads, fe.lates)
	}
}

// TestDeferredLossRefusesNonFinite: a non-finite loss read late — by the
// next step, or by the settle before a save or at the epoch's end — still
// ends the run, naming the iteration it belongs to.
func TestDeferredLossRefusesNonFinite(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	for _, iters := range []int{1, 2} { // the read at the epoch's end, and a late read
		fe := &fetchingEmu{Backend: cpu.NewEmulated(), t: t}
		tr, rec := firstBatch(t, src, cats, "emu", fe)
		nanWeights(tr)
		var gs gradSet
		var ep Epoch
		tp := tensor.NewTape(tr.be)
		var err error
		for i := 0; i < iters && err == nil; i++ {
			_, err = tr.step(tp, rec, 0, &gs, &ep)
			tr.st.NI++
		}
		if iters == 1 {
			if err != nil {
				t.Fatalf("step: %v, want the loss still on its way", err)
			}
			err = tr.settle(&gs, &ep)
		}
		rec.Release()
		if err == nil || !strings.Contains(err.Error(), "iteration 0: loss is NaN") {
			t.Errorf("%d steps with NaN weights: %v, want iteration 0's NaN loss refused", iters, err)
		}
		gs.drop()
		gs.batch.release(tr.dev)
	}
}
