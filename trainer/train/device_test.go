package train

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/device"
)

// A run on the emulated device — interrupted and resumed, with gradients
// pending at the split — ends with the same weights, optimiser and EMA
// state, gradients and loss curve, bit for bit, as an uninterrupted CPU
// run: the device boundary changes no number.
func TestEmuTrainsLikeCPU(t *testing.T) {
	shards, _, _ := synthShards(t, 6)
	src, cats := open(t, shards)
	cfg := tinyConfig(2)
	cfg.Batch, cfg.NBS = 2, 4 // 3 batches an epoch, an optimiser step every 2
	cfg.Optimizer = "musgd"
	a, b := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: a}); err != nil {
		t.Fatal(err)
	}
	cfg.Device = "emu"
	_, err := Run(context.Background(), Options{Config: cfg, Train: Local(src), Categories: cats, Out: b, StopAfterIterations: 3})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("split emu run: %v, want ErrInterrupted", err)
	}
	if _, err := Run(context.Background(), Options{Train: Local(src), Out: b, Resume: true}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{LastFile, StateFile} {
		sameTensors(t, filepath.Join(a, f), filepath.Join(b, f))
	}
	ha, hb := historyOf(t, a), historyOf(t, b)
	if len(ha) != len(hb) {
		t.Fatalf("%d vs %d epochs", len(ha), len(hb))
	}
	for i := range ha {
		if ha[i].Loss != hb[i].Loss || ha[i].LR != hb[i].LR || ha[i].MaskMAP != hb[i].MaskMAP || ha[i].BoxMAP != hb[i].BoxMAP {
			t.Errorf("epoch %d on emu: loss %v mask mAP %v, cpu %v %v", i+1, hb[i].Loss, hb[i].MaskMAP, ha[i].Loss, ha[i].MaskMAP)
		}
	}
}

// sameTensors compares every tensor of two safetensors files (their
// metadata names the device, so not the bytes).
func sameTensors(t *testing.T, a, b string) {
	t.Helper()
	fa, err := safetensors.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := safetensors.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(fa.Tensors) != len(fb.Tensors) {
		t.Errorf("%s: %d vs %d tensors", filepath.Base(a), len(fa.Tensors), len(fb.Tensors))
	}
	for k, v := range fa.Tensors {
		if w, ok := fb.Tensors[k]; !ok || !bytes.Equal(v.Data, w.Data) {
			t.Errorf("%s: tensor %s differs between cpu and emu", filepath.Base(a), k)
		}
	}
}

func TestCUDAIsRefusedClearly(t *testing.T) {
	if _, err := device.Open("cuda"); err == nil {
		t.Skip("a CUDA device is present: cuda is not refused here")
	}
	c := DefaultConfig()
	c.Device = "cuda"
	err := c.Validate()
	if !errors.Is(err, ErrDevice) {
		t.Fatalf("cuda: %v, want ErrDevice", err)
	}
}
