package pipeline

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/segpipe/segpipe/formats/batch"
)

// Mixup and cutmix fetch their partners (and the partners' mosaic tiles)
// by position like a mosaic's partners: the batches are the same at any
// worker count; a mixed sample carries its partners' instances too; and
// the close-mosaic epoch, where Ultralytics turns both off, is exactly
// the run without them.
func TestMixAndCutmixDeterministicAndOffWithMosaic(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 24, 5), BlockSize: 8}
	cfg := testConfig() // 2 epochs, the second without mosaic
	plain := run(t, src, cfg, -1)
	defer plain.release()
	cfg.Augment.Mixup, cfg.Augment.Cutmix = 1, 1
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
		t.Errorf("mosaic epoch: %d instances with mixup, %d without", b, a)
	}
	for i := perEpoch; i < len(mixed.recs); i++ {
		if !array.RecordEqual(plain.recs[i], mixed.recs[i]) {
			t.Errorf("close-mosaic batch %d differs from the run without mixup", i)
		}
	}
	cfg.Augment.FlipUD, cfg.Augment.BGR = 0.5, 0.5
	cfg.Workers = 1
	one := run(t, src, cfg, -1)
	defer one.release()
	cfg.Workers = 8
	eight := run(t, src, cfg, -1)
	defer eight.release()
	equalRuns(t, one.recs, eight.recs)
}
