package pipeline

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/augment"
)

// Mixup, cutmix and copy-paste (in both modes) fetch their partners (and
// the partners' mosaic tiles) by position like a mosaic's partners: the
// batches are the same at any worker count; a mixed or pasting sample
// carries more instances; and the close-mosaic epoch, where Ultralytics
// turns them off, is exactly the run without them.
func TestPartnersDeterministicAndOffWithMosaic(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 24, 5), BlockSize: 8}
	base := testConfig() // 2 epochs, the second without mosaic
	plain := run(t, src, base, -1)
	defer plain.release()
	for _, tc := range []struct {
		name      string
		on, extra func(*augment.Config) // the setting; more draws for the worker check
	}{
		{"mixup and cutmix",
			func(a *augment.Config) { a.Mixup, a.Cutmix = 1, 1 },
			func(a *augment.Config) { a.FlipUD, a.BGR = 0.5, 0.5 }},
		// The partners of mixup and cutmix get pastes of their own, in
		// mixup mode from sources fetched for them.
		{"copy_paste flip",
			func(a *augment.Config) { a.CopyPaste, a.CopyPasteMode = 1, "flip" },
			func(a *augment.Config) { a.Mixup, a.Cutmix, a.FlipLR = 0.5, 0.5, 0.5 }},
		{"copy_paste mixup",
			func(a *augment.Config) { a.CopyPaste, a.CopyPasteMode = 1, "mixup" },
			func(a *augment.Config) { a.Mixup, a.Cutmix, a.FlipLR = 0.5, 0.5, 0.5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.on(&cfg.Augment)
			mixed := run(t, src, cfg, -1)
			defer mixed.release()
			perEpoch := len(mixed.recs) / 2
			count := func(r result) (n int) {
				for _, rec := range r.recs[:perEpoch] {
					ms, err := batch.MaskStack(rec)
					if err != nil {
						t.Fatal(err)
					}
					n += ms.Count
				}
				return n
			}
			if a, b := count(plain), count(mixed); b <= a {
				t.Errorf("mosaic epoch: %d instances with %s, %d without", b, tc.name, a)
			}
			for i := perEpoch; i < len(mixed.recs); i++ {
				if !array.RecordEqual(plain.recs[i], mixed.recs[i]) {
					t.Errorf("close-mosaic batch %d differs from the run without %s", i, tc.name)
				}
			}
			tc.extra(&cfg.Augment)
			cfg.Workers = 1
			one := run(t, src, cfg, -1)
			defer one.release()
			cfg.Workers = 8
			eight := run(t, src, cfg, -1)
			defer eight.release()
			equalRuns(t, one.recs, eight.recs)
		})
	}
}
