package train

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// firstBatch sets up a tiny run at batch 2 on dev (on be when not nil,
// whose kind dev is) and returns it with the loader's first batch, which
// the caller releases.
func firstBatch(t *testing.T, src *pipeline.ShardSource, cats []shard.Category, dev string, be backend.Backend) (*trainer, arrow.RecordBatch) {
	t.Helper()
	cfg := tinyConfig(1)
	cfg.Device, cfg.Batch = dev, 2
	tr := &trainer{opt: Options{Config: cfg, Train: Local(src), Categories: cats, Out: t.TempDir(), Backend: deviceOf(be)}, log: discardLogger()}
	if err := tr.setup(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ld, err := pipeline.New(ctx, pipeline.Repeat(src, 1), pipeline.Config{BatchSize: cfg.Batch, Augment: defaultAugFrom(cfg), Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	rec, err := ld.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tr, rec
}

// TestStepRefusesNonFiniteLoss: the total that comes down from the loss
// on the backend is what the NaN check reads, on cpu and emu alike.
func TestStepRefusesNonFiniteLoss(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	for _, dev := range []string{"cpu", "emu"} {
		t.Run(dev, func(t *testing.T) {
			tr, rec := firstBatch(t, src, cats, dev, nil)
			defer rec.Release()
			nanWeights(tr)
			var gs gradSet
			var ep Epoch
			_, err := tr.step(tensor.NewTape(tr.be), rec, 0, &gs, &ep)
			if err == nil || !strings.Contains(err.Error(), "loss is NaN") {
				t.Fatalf("step with NaN weights: %v, want the NaN loss refused", err)
			}
		})
	}
}

// nanWeights sets every weight of tr's model to NaN.
func nanWeights(tr *trainer) {
	for _, p := range tr.m.Params() {
		v := make([]float32, p.Value.Numel())
		for i := range v {
			v[i] = float32(math.NaN())
		}
		p.Value.FromHost(v)
	}
}

// noLossKernel is the emulated device without RunHost: a backend that has
// no loss kernel, as the CUDA backend is until its loss twin lands.
type noLossKernel struct{ backend.Backend }

// TestLossWithoutLossKernel: on a backend without a loss kernel the
// step's loss takes the host round trip, warns once, and gives emu's
// result and seeds to the bit; the round trip costs exactly the outputs
// and targets down and the gradients and result up.
func TestLossWithoutLossKernel(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	tr, rec := firstBatch(t, src, cats, "emu", nil)
	defer rec.Release()
	var db deviceBatch
	x, tg, err := db.upload(tr.dev, rec)
	if err != nil {
		t.Fatal(err)
	}
	mo, err := tr.m.Forward(nil, x, model.Train)
	if err != nil {
		t.Fatal(err)
	}
	outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
		mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
	var outBytes int64
	for _, o := range outs {
		outBytes += int64(4 * o.Numel())
	}
	type run struct {
		res   lossResult
		seeds [][]float32
		moved backend.Transfers
		warns int
	}
	var runs [2]run
	for k, be := range []backend.Backend{tr.be, noLossKernel{tr.be}} {
		crit, err := loss.NewCriterion(loss.DefaultConfig(tr.cfg.Epochs))
		if err != nil {
			t.Fatal(err)
		}
		var dl deviceLoss
		warn := func(string, ...any) { runs[k].warns++ }
		for range 2 {
			t0 := be.Transfers()
			sl, err := dl.run(deviceOf(be), crit, geometry(mo, tr.cfg.Classes), outs, tg, warn)
			if err != nil {
				t.Fatal(err)
			}
			if runs[k].res, err = sl.read(); err != nil {
				t.Fatal(err)
			}
			t1 := be.Transfers()
			runs[k].moved = backend.Transfers{Uploads: t1.Uploads - t0.Uploads, Downloads: t1.Downloads - t0.Downloads,
				UploadBytes: t1.UploadBytes - t0.UploadBytes, DownloadBytes: t1.DownloadBytes - t0.DownloadBytes}
		}
		for _, s := range dl.seeds {
			runs[k].seeds = append(runs[k].seeds, s.ToHost(nil))
		}
	}
	a, b := runs[0], runs[1]
	if !(a.res.Total > 0) {
		t.Fatalf("loss on emu %+v: want a positive total", a.res)
	}
	if a.res != b.res {
		t.Errorf("loss without a loss kernel %+v, on emu %+v", b.res, a.res)
	}
	for i := range a.seeds {
		for j := range a.seeds[i] {
			if math.Float32bits(a.seeds[i][j]) != math.Float32bits(b.seeds[i][j]) {
				t.Fatalf("seed %d differs at %d", i, j)
			}
		}
	}
	if a.warns != 0 || b.warns != 1 {
		t.Errorf("warnings: %d on emu, %d without a loss kernel; want 0 and 1", a.warns, b.warns)
	}
	if a.moved != (backend.Transfers{Downloads: 1, DownloadBytes: 4 * loss.ResultLen}) {
		t.Errorf("loss on emu moved %+v, want the one result download", a.moved)
	}
	if b.moved.Uploads != 9 || b.moved.UploadBytes != outBytes+4*loss.ResultLen || b.moved.Downloads != 1+8+5 || b.moved.DownloadBytes <= outBytes+4*loss.ResultLen {
		t.Errorf("loss without a loss kernel moved %+v: want the 8 gradients and the result up (%d B), the 8 outputs and 5 target arrays down, and the result", b.moved, outBytes+4*loss.ResultLen)
	}
}
