package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/synthshards"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/metrics"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
)

// synthShards writes n synthetic COCO images (long side 96) as shards and
// returns the shard directory and the dataset directory.
func synthShards(t *testing.T, n int) (shards, data string, sc synth.Config) {
	t.Helper()
	sc = synth.Config{Images: n, Seed: 3, MaxSide: 96, MeanInstances: 2, Workers: 1}
	shards, data = synthshards.Write(t, sc)
	return shards, data, sc
}

// tinyConfig steps the optimiser every batch at a high learning rate so
// that a handful of steps visibly fits the data.
func tinyConfig(epochs int) Config {
	c := DefaultConfig()
	c.Epochs, c.Batch, c.Imgsz, c.Workers = epochs, 4, 64, 1
	c.Optimizer, c.LR0, c.NBS, c.WarmupEpochs = "sgd", 0.01, 4, 0
	c.Mosaic, c.FlipLR, c.HSVH, c.HSVS, c.HSVV, c.Scale, c.Translate, c.CloseMosaic = 0, 0, 0, 0, 0, 0, 0, 0
	c.MaxDet = 50
	return c
}

func open(t *testing.T, dir string) (*pipeline.ShardSource, []shard.Category) {
	t.Helper()
	src, err := pipeline.OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, src.Manifest().Categories
}

func TestTrainingDecreasesLoss(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	out := t.TempDir()
	cfg := tinyConfig(6)
	cfg.ValEvery = 6
	sum, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	first, last := sum.Epochs[0], sum.Epochs[len(sum.Epochs)-1]
	total := func(e Epoch) float64 { return e.Loss[0] + e.Loss[1] + e.Loss[2] + e.Loss[3] + e.Loss[4] }
	t.Logf("loss %v → %v; box mAP50 %.3f mask mAP50 %.3f", first.Loss, last.Loss, last.BoxMAP50, last.MaskMAP50)
	if !(total(last) < 0.9*total(first)) {
		t.Errorf("loss did not decrease by 10%%: %.4f → %.4f", total(first), total(last))
	}
	if last.BoxMAP < 0 || last.MaskMAP < 0 {
		t.Errorf("last epoch not validated: box %v mask %v", last.BoxMAP, last.MaskMAP)
	}
	for _, f := range []string{ConfigFile, LastFile, BestFile, StateFile, ResultsFile, PlotFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// The checkpoint names the run's configuration.
	_, meta, err := model.OpenCheckpoint(filepath.Join(out, LastFile))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Variant != "n" || meta.Imgsz != 64 || !bytes.Contains(meta.Config, []byte(`"optimizer":"sgd"`)) {
		t.Errorf("checkpoint meta %+v", meta)
	}
}

func TestResumeIsExact(t *testing.T) {
	shards, _, _ := synthShards(t, 6) // batches of 4 and 2
	src, cats := open(t, shards)
	cfg := tinyConfig(2)
	cfg.Mosaic, cfg.FlipLR, cfg.HSVV = 0.5, 0.5, 0.4 // randomness the loader must reproduce
	cfg.Optimizer, cfg.NBS = "musgd", 8              // accumulation across the epoch boundary
	a, b := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: b, StopAfter: 1}); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Epochs = 99 // ignored: a resumed run keeps its own configuration
	if _, err := Run(context.Background(), Options{Config: other, Train: Local(src), Out: b, Resume: true}); err != nil {
		t.Fatal(err)
	}
	sameRun(t, a, b)
}

func TestConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(path, []byte(`{"variant": "s", "epochs": 7, "lr0": 0.02}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadConfig(path); err != nil {
		t.Fatal(err)
	}
	if c.Variant != "s" || c.Epochs != 7 || c.LR0 != 0.02 || c.Batch != 16 {
		t.Fatalf("file over defaults: %+v", c)
	}
	if err := c.Set("epochs", "3"); err != nil {
		t.Fatal(err)
	}
	if err := c.Set("variant", "m"); err != nil {
		t.Fatal(err)
	}
	if c.Variant != "m" || c.Epochs != 3 || c.LR0 != 0.02 {
		t.Fatalf("flags over file: %+v", c)
	}
	for _, bad := range []struct{ key, val string }{{"epoch", "3"}, {"epochs", "x"}, {"lr0", "fast"}} {
		if err := c.Set(bad.key, bad.val); err == nil {
			t.Errorf("Set(%q, %q) accepted", bad.key, bad.val)
		}
	}
	if err := os.WriteFile(path, []byte(`{"varaint": "s"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadConfig(path); err == nil {
		t.Error("unknown key accepted")
	}
	c = DefaultConfig()
	c.Device = "cuda"
	if err := c.Validate(); err == nil {
		t.Error("cuda accepted")
	}
	c = DefaultConfig()
	c.Variant = "q"
	if err := c.Validate(); err == nil {
		t.Error("variant q accepted")
	}
}

// TestShippedConfigs checks that the repository's config files load and
// validate.
func TestShippedConfigs(t *testing.T) {
	files, err := filepath.Glob("../configs/*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("configs: %v %v", files, err)
	}
	for _, f := range files {
		c := DefaultConfig()
		if err := c.LoadConfig(f); err != nil {
			t.Error(err)
			continue
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestPredictWritesReadableResults(t *testing.T) {
	shards, data, sc := synthShards(t, 4)
	src, cats := open(t, shards)
	out := t.TempDir()
	cfg := tinyConfig(2)
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: out}); err != nil {
		t.Fatal(err)
	}
	m, meta, err := model.OpenCheckpoint(filepath.Join(out, LastFile))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := CheckpointCategories(meta)
	if err != nil {
		t.Fatal(err)
	}
	files, err := predict.Sources(synth.ImagesDir(data))
	if err != nil {
		t.Fatal(err)
	}
	pd := t.TempDir()
	sum, err := predict.Run(context.Background(), m, files, pd, predict.Options{Imgsz: 64, Conf: 1e-9, Categories: rc, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Images != 4 || sum.Detections == 0 {
		t.Fatalf("predict summary %+v", sum)
	}
	ds, err := metrics.ReadDatasetFile(synth.AnnotationsPath(data, sc))
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []metrics.IoUType{metrics.BBox, metrics.Segm} {
		dets, err := metrics.ReadResultsFile(ds, sum.ResultsPath, typ)
		if err != nil {
			t.Fatal(err)
		}
		if len(dets) != sum.Detections {
			t.Errorf("%s: %d detections read, %d written", typ, len(dets), sum.Detections)
		}
		if _, err := metrics.Evaluate(ds, dets, typ); err != nil {
			t.Error(err)
		}
	}
	pngs, _ := filepath.Glob(filepath.Join(pd, "*.png"))
	if len(pngs) != 4 {
		t.Errorf("%d PNGs, want 4", len(pngs))
	}
}

// TestRunConfigIsAConfig: a run directory's config.json, as the run wrote
// it, starts a new run with the same settings (--config RUN/config.json).
func TestRunConfigIsAConfig(t *testing.T) {
	want := DefaultConfig()
	want.Variant, want.Epochs, want.LR0, want.Shards = "s", 9, 0.004, "/data/train"
	d := &runDir{path: t.TempDir(), cfg: want, cats: []shard.Category{{ID: 1, Index: 0, Name: "disc"}}}
	if err := d.writeConfig(); err != nil {
		t.Fatal(err)
	}
	got := DefaultConfig()
	if err := got.LoadConfig(filepath.Join(d.path, ConfigFile)); err != nil {
		t.Fatalf("a run's config.json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
}
