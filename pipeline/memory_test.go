package pipeline

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/pipeline/augment"
)

// The ticket of issue 16 (batch 64 at imgsz 16384) asked for a 64 GiB
// image buffer in the first batch; the loader must refuse it up front.
func TestNewRefusesWhatDoesNotFit(t *testing.T) {
	a := augment.DefaultConfig()
	a.ImgSz = 16384
	cfg := Config{BatchSize: 64, Workers: 2, Augment: a, MaxMemory: 8 << 30}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l, err := New(context.Background(), &SliceSource{Rows: synth(t, 4, 0)}, cfg)
	runtime.ReadMemStats(&after)
	if err == nil {
		l.Close()
		t.Fatal("New accepted a loader estimated far over its memory limit")
	}
	if !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("error %v does not wrap ErrMemoryLimit", err)
	}
	for _, want := range []string{"batch size 64", "imgsz 16384", "8.0 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing allocated %d bytes", grew)
	}
	if err := cfg.Validate(); !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("Validate: %v, want ErrMemoryLimit", err)
	}
}

func TestMemoryEstimate(t *testing.T) {
	a := augment.DefaultConfig()
	a.ImgSz = 640
	cases := []struct {
		name string
		cfg  Config
		min  int64 // the image buffers alone
	}{
		{"default", Config{Workers: 2, Augment: a}, int64(2*2+4) * 32 * 3 * 640 * 640},
		{"prefetch 8", Config{Workers: 2, Prefetch: 8, BatchSize: 16, Augment: a}, 12 * 16 * 3 * 640 * 640},
	}
	for _, c := range cases {
		m, err := c.cfg.Memory()
		if err != nil {
			t.Fatal(err)
		}
		if m.Batches < c.min || m.Batches > c.min*3/2 {
			t.Errorf("%s: batches %d, want between %d and 1.5×", c.name, m.Batches, c.min)
		}
		if m.Cache != 512<<20 {
			t.Errorf("%s: cache %d, want the default 512 MiB", c.name, m.Cache)
		}
	}
	shared := Config{Workers: 2, Augment: a, ImageCache: NewImageCache(1 << 30)}
	if m, _ := shared.Memory(); m.Cache != 0 {
		t.Errorf("a shared cache is the owner's to count, got %d", m.Cache)
	}
	// A negative limit turns the check off; the shape is still checked.
	big := Config{Workers: 2, BatchSize: 64, Augment: a, MaxMemory: -1}
	big.Augment.ImgSz = 16384
	if err := big.Validate(); err != nil {
		t.Errorf("MaxMemory -1: %v", err)
	}
}
