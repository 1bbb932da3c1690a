package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/trainer/train"
)

func TestQuickstartRunsAndReruns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qs")
	// The first run trains one epoch (the slow part, left out under
	// -short); the second stops after converting and replaces the first.
	epochs := []string{"1", "0"}
	if testing.Short() {
		epochs[0] = "0"
	}
	for i, e := range epochs {
		code, out, errs := run(t, "quickstart", "--dir", dir, "--images", "20", "--epochs", e)
		if code != ExitOK {
			t.Fatalf("run %d: exit %d\nstdout: %s\nstderr: %s", i, code, out, errs)
		}
		tc := filepath.Join(dir, quickstartConfigName)
		want := []string{"verify: ok", "wrote 20 images", "wrote 5 images", "next:", filepath.Join(dir, "shards", "train"), "train --config " + tc}
		if e != "0" {
			want = append(want, "mask mAP50", "what the numbers mean", "held-out", filepath.Join(dir, "run"), filepath.Join(dir, "preview"))
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("run %d: output lacks %q:\n%s", i, w, out)
			}
		}
		if e != "0" {
			for _, f := range []string{"run/results.csv", "run/best.safetensors", "preview/results.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
			}
		}
		// The config it writes is what `segpipe train --config` reads: the
		// quickstart schedule on its own two shard sets.
		cfg := train.DefaultConfig()
		if err := cfg.LoadConfig(tc); err != nil {
			t.Fatal(err)
		}
		if cfg.Shards != filepath.Join(dir, "shards", "train") || cfg.ValShards != filepath.Join(dir, "shards", "val") {
			t.Fatalf("%s: shards %q, val_shards %q", tc, cfg.Shards, cfg.ValShards)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); !os.IsNotExist(err) {
		t.Fatalf("the second run left the first run's training output: %v", err)
	}
	for split, rows := range map[string]int64{"train": 20, "val": 5} {
		set, err := shard.Open(filepath.Join(dir, "shards", split))
		if err != nil || set.Manifest.Rows != rows {
			t.Fatalf("%s shards after quickstart: %v", split, err)
		}
	}
}

// TestQuickstartScheduleReadsAsTrainDoes holds the embedded schedule's
// parse to what `segpipe train --config trainer/configs/quickstart.json`
// reads, so the two cannot drift if the config loader changes.
func TestQuickstartScheduleReadsAsTrainDoes(t *testing.T) {
	want := train.DefaultConfig()
	if err := want.LoadConfig(filepath.Join("..", "trainer", "configs", "quickstart.json")); err != nil {
		t.Fatal(err)
	}
	if got := quickstartTrainConfig(); got != want {
		t.Fatalf("quickstart trains with\n%+v\ntrain --config trainer/configs/quickstart.json reads\n%+v", got, want)
	}
	if quickstartEpochs != want.Epochs {
		t.Fatalf("--epochs defaults to %d, the file has %d", quickstartEpochs, want.Epochs)
	}
}

func TestQuickstartRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "thesis.tex")
	os.WriteFile(precious, []byte("x"), 0o644)
	code, _, errs := run(t, "quickstart", "--dir", dir)
	if code != ExitFailure || !strings.Contains(errs, "not made by quickstart") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatal("quickstart touched a foreign directory")
	}
	if code, _, _ := run(t, "quickstart", "--images", "0"); code != ExitUsage {
		t.Fatalf("--images 0: exit %d, want %d", code, ExitUsage)
	}
}
