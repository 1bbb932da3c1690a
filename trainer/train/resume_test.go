package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
)

// cancelAfter cancels ctx once the epoch progress has seen n images.
type cancelAfter struct {
	n, seen int
	cancel  context.CancelFunc
}

func (c *cancelAfter) Add(k int) {
	if c.seen += k; c.seen >= c.n {
		c.cancel()
	}
}
func (c *cancelAfter) Finish() {}

// A run split between batches — by an iteration limit and by a cancelled
// context, both mid-epoch and while gradients are accumulating towards the
// next optimiser step — ends with the same weights, optimiser buffers and
// loss curve as an uninterrupted run.
func TestMidEpochResumeIsExact(t *testing.T) {
	shards, _, _ := synthShards(t, 10)
	src, cats := open(t, shards)
	cfg := tinyConfig(2)
	cfg.Batch, cfg.NBS = 2, 6 // 5 batches an epoch, an optimiser step every 3
	cfg.Optimizer, cfg.Mosaic, cfg.FlipLR, cfg.HSVV = "musgd", 0.5, 0.5, 0.4
	a, b := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: a}); err != nil {
		t.Fatal(err)
	}

	// 4 iterations: mid-epoch 1 with one batch of gradients pending.
	_, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: b, StopAfterIterations: 4})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("split run: %v, want ErrInterrupted", err)
	}
	st, err := safetensors.ReadFile(filepath.Join(b, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Tensors[prefixGrad+"model.0.conv.weight"]; !ok {
		t.Error("state saved with gradients pending holds no gradients")
	}
	// Then cancel through the context after 4 more images (epoch 2, batch
	// 2), crossing the epoch end, which itself falls mid-accumulation.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := &cancelAfter{n: 4, cancel: cancel}
	_, err = Run(ctx, Options{Train: Local(src), Out: b, Resume: true,
		NewProgress: func(what string, _ int) Progress {
			if strings.HasPrefix(what, "epoch 2/") {
				return ca
			}
			return nil
		}})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v, want ErrInterrupted and context.Canceled", err)
	}
	if _, err := Run(context.Background(), Options{Train: Local(src), Out: b, Resume: true}); err != nil {
		t.Fatal(err)
	}
	sameRun(t, a, b)
}

// sameRun compares two run directories: last.safetensors bytes, every
// tensor of the state (its metadata holds wall-clock timings, so not the
// file's bytes), and the loss, learning-rate and mAP columns.
func sameRun(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(a, LastFile))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, LastFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s differs between the uninterrupted and the resumed run", LastFile)
	}
	sa, err := safetensors.ReadFile(filepath.Join(a, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := safetensors.ReadFile(filepath.Join(b, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(sa.Tensors) != len(sb.Tensors) {
		t.Errorf("state tensors %d vs %d", len(sa.Tensors), len(sb.Tensors))
	}
	for k, v := range sa.Tensors {
		if w, ok := sb.Tensors[k]; !ok || !bytes.Equal(v.Data, w.Data) {
			t.Errorf("state tensor %s differs", k)
		}
	}
	ha, hb := historyOf(t, a), historyOf(t, b)
	if len(ha) != len(hb) {
		t.Fatalf("%d vs %d epochs", len(ha), len(hb))
	}
	for i := range ha {
		if ha[i].Loss != hb[i].Loss || ha[i].LR != hb[i].LR || ha[i].MaskMAP != hb[i].MaskMAP {
			t.Errorf("epoch %d: loss %v lr %v mask mAP %v, want %v %v %v", i+1, hb[i].Loss, hb[i].LR, hb[i].MaskMAP, ha[i].Loss, ha[i].LR, ha[i].MaskMAP)
		}
	}
}

func historyOf(t *testing.T, dir string) []Epoch {
	t.Helper()
	tr := &trainer{opt: Options{Out: dir}, log: discardLogger()}
	f, err := safetensors.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(f.Metadata[metaState]), &tr.st); err != nil {
		t.Fatal(err)
	}
	return tr.st.History
}
