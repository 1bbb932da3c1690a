package pipeline

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/segpipe/segpipe/formats/batch"
)

// Copy-paste in both modes: the batches are the same at any worker count
// (mixup mode fetches its source by position, as mixup fetches a
// partner); a pasting run carries more instances than the run without;
// and the close-mosaic epoch, where Ultralytics turns it off, is exactly
// the run without it.
func TestCopyPasteDeterministicAndOffWithMosaic(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 24, 5), BlockSize: 8}
	cfg := testConfig() // 2 epochs, the second without mosaic
	plain := run(t, src, cfg, -1)
	defer plain.release()
	count := func(r result, n int) (c int) {
		for _, rec := range r.recs[:n] {
			ms, err := batch.MaskStack(rec)
			if err != nil {
				t.Fatal(err)
			}
			c += ms.Count
		}
		return c
	}
	for _, mode := range []string{"flip", "mixup"} {
		t.Run(mode, func(t *testing.T) {
			cfg := cfg
			cfg.Augment.CopyPaste, cfg.Augment.CopyPasteMode = 1, mode
			pasted := run(t, src, cfg, -1)
			defer pasted.release()
			perEpoch := len(pasted.recs) / 2
			if a, b := count(plain, perEpoch), count(pasted, perEpoch); b <= a {
				t.Errorf("mosaic epoch: %d instances with copy-paste, %d without", b, a)
			}
			for i := perEpoch; i < len(pasted.recs); i++ {
				if !array.RecordEqual(plain.recs[i], pasted.recs[i]) {
					t.Errorf("close-mosaic batch %d differs from the run without copy-paste", i)
				}
			}
			cfg.Augment.Mixup, cfg.Augment.FlipLR = 0.5, 0.5
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
