package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/cuda"
)

func TestTF32FromEnvironment(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
		ok   bool
	}{{"", false, true}, {"1", true, true}, {"true", true, true}, {"0", false, true}, {"yes", false, false}} {
		t.Setenv(TF32Env, c.v)
		got, err := TF32()
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("%s=%q: %v, %v; want %v, ok %v", TF32Env, c.v, got, err, c.want, c.ok)
		}
	}
}

// Without a GPU, cuda fails with an error that is ErrUnavailable and says
// what is missing; with one it opens, once per process.
func TestOpenCUDA(t *testing.T) {
	d, err := Open("cuda")
	if err != nil {
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, cuda.ErrUnavailable) {
			t.Fatalf("Open(cuda): %v, want ErrUnavailable and cuda.ErrUnavailable", err)
		}
		if !strings.HasPrefix(err.Error(), "device cuda: not available: ") || len(err.Error()) < 40 {
			t.Errorf("Open(cuda): %q does not say what is missing", err)
		}
		t.Skipf("no GPU here: %v", err)
	}
	be := d.Backend
	if be.Name() != "cuda" || be.Host(be.Alloc(1)) != nil || d.Host {
		t.Errorf("Open(cuda) = %s backend with host-addressable memory", be.Name())
	}
	again, err := Open("cuda")
	if err != nil || again != d {
		t.Errorf("second Open(cuda) = %v, %v; want the same backend", again, err)
	}
}

func TestOpenUnknown(t *testing.T) {
	if _, err := Open("tpu"); err == nil || !strings.Contains(err.Error(), "want cpu, emu or cuda") {
		t.Errorf("Open(tpu): %v", err)
	}
}

// TestOpenPrecision: every device takes the precision names and refuses
// another; cpu and emu compute in fp32 whatever is asked.
func TestOpenPrecision(t *testing.T) {
	for _, c := range []struct {
		name, precision string
		ok              bool
	}{
		{"cpu", "", true}, {"cpu", "fp32", true}, {"cpu", "tf32", true}, {"emu", "tf32", true},
		{"cpu", "bf16", false}, {"emu", "FP32", false},
	} {
		_, err := OpenPrecision(c.name, c.precision)
		if (err == nil) != c.ok {
			t.Errorf("OpenPrecision(%q, %q): %v", c.name, c.precision, err)
		}
	}
}
