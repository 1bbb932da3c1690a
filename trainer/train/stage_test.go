package train

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// stagingEmu is the emulated device with a backend.Stager: the contract
// the CUDA backend implements with pinned slots and a copy stream, here
// two slots of emu memory filled with UploadBytes (so the crossings are
// counted as the CUDA backend counts them). Each refill first poisons the
// slot with NaN, and it fails the test when a slot is refilled before the
// batch in it was marked done — what would let the copy of batch i+2
// overwrite what the step of batch i still reads.
type stagingEmu struct {
	*cpu.Backend
	t      *testing.T
	slots  [2]backend.Buffer
	filled [2]bool
	done   [2]bool
	next   int
	last   int
	stages int
}

func (s *stagingEmu) Stage(parts ...[]byte) ([]backend.Buffer, error) {
	i := s.next
	s.next ^= 1
	if s.filled[i] && !s.done[i] {
		s.t.Errorf("stage %d: slot %d refilled before its batch was marked done", s.stages, i)
	}
	n := 0
	for _, p := range parts {
		n += (len(p) + 3) / 4
	}
	if s.slots[i].Len < n {
		if s.slots[i].Present() {
			s.Free(s.slots[i])
		}
		s.slots[i] = s.Alloc(n)
	}
	s.Fill(s.slots[i], float32(math.NaN()))
	out := make([]backend.Buffer, len(parts))
	off := 0
	for k, p := range parts {
		out[k] = s.slots[i].Slice(off, off+(len(p)+3)/4)
		s.UploadBytes(out[k], p)
		off += out[k].Len
	}
	s.filled[i], s.done[i], s.last = true, false, i
	s.stages++
	return out, nil
}

func (s *stagingEmu) StageDone() { s.done[s.last] = true }

// StageIdle is zero: emu's kernels run as they are queued.
func (s *stagingEmu) StageIdle() time.Duration { return 0 }

func (s *stagingEmu) FreeStaged() {
	for i, b := range s.slots {
		if b.Present() {
			s.Free(b)
		}
		s.slots[i], s.filled[i], s.done[i] = backend.Buffer{}, false, false
	}
}

// trainSteps sets up the tiny run at batch 2 on be and trains steps steps
// on the loader's batches, each passed first through each when set (which
// takes the loader's record and returns the one to train on), and returns
// per step the loss items and the crossings of the step; after, when set,
// sees the step's batch state, which is released at the end and returned.
func trainSteps(t *testing.T, src *pipeline.ShardSource, cats []shard.Category, be backend.Backend, steps int,
	each func(i int, tr *trainer, rec arrow.RecordBatch) arrow.RecordBatch, after func(*gradSet)) ([][loss.NumComponents]float64, []backend.Transfers, *gradSet) {
	t.Helper()
	cfg := tinyConfig(1)
	cfg.Device, cfg.Batch, cfg.NBS = "emu", 2, 4
	tr := &trainer{opt: Options{Config: cfg, Train: Local(src), Categories: cats, Out: t.TempDir()}, log: discardLogger(), dev: deviceOf(be)}
	if err := tr.setup(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ld, err := pipeline.New(ctx, pipeline.Repeat(src, 4), pipeline.Config{BatchSize: cfg.Batch, Augment: defaultAugFrom(cfg), Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	tp := tensor.NewTape(tr.be)
	var gs gradSet
	var losses [][loss.NumComponents]float64
	var moved []backend.Transfers
	for i := range steps {
		rec, err := ld.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if each != nil {
			rec = each(i, tr, rec)
		}
		var ep Epoch
		t0 := tr.be.Transfers()
		if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		tr.st.NI++
		losses, moved = append(losses, ep.Loss), append(moved, t0.Since(tr.be.Transfers()))
		if after != nil {
			after(&gs)
		}
	}
	gs.batch.release(tr.dev)
	return losses, moved, &gs
}

// TestStagedStepsLikeUploaded: training steps whose batches go up through
// a Stager give emu's losses to the bit, move the same uploads and bytes
// per iteration as the UploadBytes path, and mark every batch done before
// its slot is refilled; the image tensor is the same floats either way.
func TestStagedStepsLikeUploaded(t *testing.T) {
	shards, _, _ := synthShards(t, 8)
	src, cats := open(t, shards)
	type run struct {
		losses [][loss.NumComponents]float64
		moved  []backend.Transfers
		image  []float32
	}
	var runs [2]run
	st := &stagingEmu{Backend: cpu.NewEmulated(), t: t}
	for k, be := range []backend.Backend{cpu.NewEmulated(), st} {
		image := func(i int, tr *trainer, rec arrow.RecordBatch) arrow.RecordBatch {
			if i == 0 {
				var db deviceBatch
				x, _, err := db.upload(tr.dev, rec)
				if err != nil {
					t.Fatal(err)
				}
				runs[k].image = x.ToHost(nil)
				db.release(tr.dev)
			}
			return rec
		}
		runs[k].losses, runs[k].moved, _ = trainSteps(t, src, cats, be, 5, image, nil)
	}
	a, b := runs[0], runs[1]
	for j := range a.image {
		if math.Float32bits(a.image[j]) != math.Float32bits(b.image[j]) {
			t.Fatalf("staged image element %d = %v, uploaded %v", j, b.image[j], a.image[j])
		}
	}
	for i := range a.losses {
		if a.losses[i] != b.losses[i] {
			t.Errorf("iteration %d: staged loss %v, uploaded %v", i, b.losses[i], a.losses[i])
		}
		if a.moved[i] != b.moved[i] || b.moved[i].Uploads != 6 {
			t.Errorf("iteration %d: staged path moved %+v, UploadBytes path %+v (want 6 uploads each)", i, b.moved[i], a.moved[i])
		}
	}
	if st.stages != 6 { // one per step, and the image check's
		t.Errorf("%d batches staged, want 6", st.stages)
	}
	if st.slots[0].Present() || st.slots[1].Present() {
		t.Error("slots still held after release")
	}
}
