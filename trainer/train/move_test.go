package train

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A run interrupted on one device resumes on another (Options.Device):
// config.json then names the new device, and on cpu → emu, whose numbers
// are the CPU's, the result is the uninterrupted CPU run's bit for bit.
func TestResumeMovesDevice(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	cfg := tinyConfig(2)
	cfg.Batch, cfg.NBS = 2, 2
	a, b := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: a}); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: b, StopAfterIterations: 3})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("split run: %v, want ErrInterrupted", err)
	}
	if _, err := Run(context.Background(), Options{Train: Local(src), Out: b, Resume: true, Device: "emu"}); err != nil {
		t.Fatal(err)
	}
	moved, err := ReadRunConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Device != "emu" {
		t.Errorf("config.json after the move names device %q, want emu", moved.Device)
	}
	for _, f := range []string{LastFile, StateFile} {
		sameTensors(t, filepath.Join(a, f), filepath.Join(b, f))
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: t.TempDir(), Device: "emu"}); err == nil ||
		!strings.Contains(err.Error(), "resumed run") {
		t.Errorf("a fresh run with Options.Device: %v, want a refusal", err)
	}
	if _, err := Run(context.Background(), Options{Train: Local(src), Out: b, Resume: true, Device: "tpu"}); err == nil ||
		!strings.Contains(err.Error(), `device "tpu"`) {
		t.Errorf("resume on an unknown device: %v, want a refusal naming it", err)
	}
}
