package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets/synth"
)

// --resume takes the data flags from the run's own config.json: a run
// trained for its one epoch and resumed without --shards finds its shards
// again and reports the finished run; a resume that tries to change the
// configuration is refused.
func TestTrainResumeTakesTheRunsData(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Images: 8, Seed: 3, Split: "train"}
	if err := synth.Generate(dir, cfg); err != nil {
		t.Fatal(err)
	}
	shards := filepath.Join(dir, "shards")
	if code, out, errs := run(t, "convert", "coco", "--annotations", synth.AnnotationsPath(dir, cfg), "--images", synth.ImagesDir(dir), "--out", shards); code != ExitOK {
		t.Fatalf("convert: exit %d\n%s\n%s", code, out, errs)
	}
	runDir := filepath.Join(dir, "run")
	if code, out, errs := run(t, "train", "--shards", shards, "--out", runDir, "--epochs", "1", "--batch", "4", "--imgsz", "64", "--workers", "1"); code != ExitOK {
		t.Fatalf("train: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run(t, "train", "--resume", runDir)
	if code != ExitOK {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := run(t, "train", "--resume", runDir, "--epochs", "3"); code != ExitUsage || !strings.Contains(errs, "--epochs cannot change it") {
		t.Fatalf("resume with --epochs: exit %d, stderr %q; want a usage error", code, errs)
	}
	if code, _, errs := run(t, "train", "--resume", filepath.Join(dir, "nothing")); code == ExitOK || !strings.Contains(errs, "resume") {
		t.Fatalf("resume of a missing run: exit %d, stderr %q", code, errs)
	}
}
