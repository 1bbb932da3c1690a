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

// encodedSlice is a SliceSource that reports an encoded size.
type encodedSlice struct {
	SliceSource
	bytes int64
}

func (s *encodedSlice) EncodedBytes() int64 { return s.bytes }

// Issue 30: the estimate counted the batches and the cache's byte bound
// only, and a run peaked 1.29× over it. Every term the loader keeps live
// is in it now, and a source that knows its encoded size sizes the window.
func TestMemoryEstimateTerms(t *testing.T) {
	a := augment.DefaultConfig()
	a.ImgSz = 320
	rows := synth(t, 64, 0)
	cases := []struct {
		name       string
		cfg        Config
		src        Source
		window     int64
		cache      int64
		free       int64
		decodingGE int64
	}{
		{"settings alone", Config{Workers: 2, Augment: a, CacheBytes: 64 << 20}, nil,
			2 * (512*EstimateRowBytes + 16<<20), 64 << 20, maxFree * EstimateImageBytes, 9 * EstimateImageBytes},
		{"small source: the whole source twice", Config{Workers: 1, Augment: a, CacheBytes: 8 << 20},
			&encodedSlice{SliceSource{Rows: rows}, 3 << 20}, 2 * (3 << 20), 8 << 20, maxFree * EstimateImageBytes, 5 * EstimateImageBytes},
		{"large source: its mean row, two windows", Config{Workers: 1, Augment: a, WindowRows: 32},
			&encodedSlice{SliceSource{Rows: rows}, 64 << 30}, 2 * (32*(1<<30) + 16<<20), DefaultCacheBytes, maxFree * EstimateImageBytes, 5 * EstimateImageBytes},
		{"shared cache: the owner's", Config{Workers: 1, Augment: a, ImageCache: NewImageCache(1 << 30)}, nil,
			2 * (512*EstimateRowBytes + 16<<20), 0, 0, 5 * EstimateImageBytes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.cfg.MemoryOf(c.src)
			if err != nil {
				t.Fatal(err)
			}
			if m.Window != c.window || m.Cache != c.cache || m.CacheFree != c.free || m.Decoding < c.decodingGE {
				t.Errorf("window %d cache %d free %d decoding %d, want %d %d %d ≥%d", m.Window, m.Cache, m.CacheFree, m.Decoding, c.window, c.cache, c.free, c.decodingGE)
			}
			if got, want := m.Total(), m.Batches+m.Cache+m.CacheFree+m.Decoding+m.Window; got != want {
				t.Errorf("Total %d, want the sum of the terms %d", got, want)
			}
			if b := Budget(m.Total()); b < ProcessBytes+m.Total()+m.Total()*gcPercent()/100 {
				t.Errorf("Budget %d leaves out the process or the collector's headroom", b)
			}
		})
	}
	// New judges by the source: refused on settings alone, admitted when
	// the source says its rows are small.
	cfg := Config{Workers: 1, BatchSize: 2, Augment: a, CacheBytes: 4 << 20}
	small := &encodedSlice{SliceSource{Rows: rows}, 1 << 20}
	m, _ := cfg.MemoryOf(small)
	cfg.MaxMemory = Budget(m.Total())
	if err := cfg.Validate(); !errors.Is(err, ErrMemoryLimit) {
		t.Errorf("Validate on settings alone: %v, want ErrMemoryLimit", err)
	}
	l, err := New(context.Background(), small, cfg)
	if err != nil {
		t.Fatalf("New over a source whose window fits: %v", err)
	}
	l.Close()
}

// TestMemoryAdvice: a refusal names the largest term's setting first.
func TestMemoryAdvice(t *testing.T) {
	cases := []struct {
		m    Memory
		want string
	}{
		{Memory{Batches: 100, Cache: 10, Window: 1}, "lower the batch size or imgsz, the decoded-image cache or the shuffle window"},
		{Memory{Batches: 10, Decoding: 5, Cache: 4, CacheFree: 4, Window: 95}, "lower the shuffle window, the batch size or imgsz or the decoded-image cache"},
		{Memory{Batches: 1, Cache: 50, CacheFree: 10, Window: 20}, "lower the decoded-image cache, the shuffle window or the batch size or imgsz"},
	}
	for _, c := range cases {
		if got := c.m.Advice(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}

// The decoded images and scratch a worker holds grow with the settings
// that fetch more samples: four tiles for each mix partner and for each
// mixup-mode copy-paste source (the sample's and each partner's), one
// canvas of scratch for mixing or pasting, two when a partner pastes.
func TestDecodingCountsPartnersAndPasteSources(t *testing.T) {
	const workers = 2
	canvas := int64(3 * 320 * 320)
	for _, tc := range []struct {
		name    string
		set     func(*augment.Config)
		tiles   int64 // a worker's
		scratch int64 // canvases a worker's
	}{
		{"mosaic only", func(*augment.Config) {}, 4, 0},
		{"mixup", func(a *augment.Config) { a.Mixup = 0.5 }, 8, 1},
		{"mixup and cutmix", func(a *augment.Config) { a.Mixup, a.Cutmix = 0.5, 0.5 }, 12, 1},
		{"copy_paste flip", func(a *augment.Config) { a.CopyPaste = 0.5 }, 4, 1},
		{"copy_paste mixup", func(a *augment.Config) { a.CopyPaste, a.CopyPasteMode = 0.5, augment.PasteMixup }, 8, 1},
		{"copy_paste flip, mixup, cutmix", func(a *augment.Config) { a.CopyPaste, a.Mixup, a.Cutmix = 0.5, 0.5, 0.5 }, 12, 2},
		{"copy_paste mixup, mixup, cutmix", func(a *augment.Config) {
			a.CopyPaste, a.CopyPasteMode, a.Mixup, a.Cutmix = 0.5, augment.PasteMixup, 0.5, 0.5
		}, 24, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := augment.DefaultConfig()
			a.ImgSz = 320
			tc.set(&a)
			m, err := Config{Workers: workers, Augment: a}.MemoryOf(nil)
			if err != nil {
				t.Fatal(err)
			}
			want := (tc.tiles*workers+1)*EstimateImageBytes + tc.scratch*workers*canvas
			if m.Decoding != want {
				t.Errorf("decoding %d, want %d (%d tiles and %d scratch canvases a worker)", m.Decoding, want, tc.tiles, tc.scratch)
			}
		})
	}
}
