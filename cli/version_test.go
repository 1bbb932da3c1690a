package cli

import (
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/train"
)

func TestVersionNamesTheFrozenReference(t *testing.T) {
	code, out, errs := run(t, "version")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"segpipe " + Version, "frozen reference: " + train.FrozenReference, "emu"} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

func TestDeviceCUDAIsRefusedWithAClearError(t *testing.T) {
	if _, err := device.Open("cuda"); err == nil {
		t.Skip("a CUDA device is present: cuda is not refused here")
	}
	code, _, errs := run(t, "predict", "--weights", "x.safetensors", "--source", "x.jpg", "--out", t.TempDir(), "--device", "cuda")
	if code == ExitOK || !strings.Contains(errs, "device cuda: not available") {
		t.Fatalf("exit %d, stderr %q: want the cuda refusal", code, errs)
	}
}
