package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
)

// damagedSource is a SliceSource whose listed blocks come back wholly
// damaged, as a ShardSource returns an unreadable row group.
type damagedSource struct {
	SliceSource
	bad map[int]bool
}

func (s *damagedSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	rows, err := s.SliceSource.ReadBlock(ctx, i)
	if err != nil || !s.bad[i] {
		return rows, err
	}
	d := &Damage{Where: fmt.Sprintf("shard part-%05d.parquet row group 0", i)}
	for r := range rows {
		d.Rows = append(d.Rows, BadRow{Row: r, Reason: SkipBadRowGroup,
			Err: fmt.Errorf("shard part-%05d.parquet row group 0: page checksum mismatch", i)})
	}
	return make([]shard.Image, len(rows)), d
}

// Issue 30 items 1 and 2: a batch whose every sample was skipped was
// emitted with zero rows (a trainer then fails on B = 0), and a set where
// nothing can be read streamed empty batches to the end and succeeded.
// A batch that loses every image gives way to the next one; an epoch that
// delivers nothing is an error naming the damage.
func TestNoEmptyBatches(t *testing.T) {
	rows := synth(t, 24, 0)
	for _, tc := range []struct {
		name   string
		bad    map[int]bool
		mosaic float64
		images int64  // delivered over the two epochs
		err    string // when the stream must fail
	}{
		{name: "one block lost, batch 1", bad: map[int]bool{2: true}, images: 2 * 20},
		{name: "one block lost, mosaic", bad: map[int]bool{0: true, 5: true}, mosaic: 1, images: 2 * 16},
		{name: "every block lost", bad: map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true},
			err: "part-00000.parquet"},
		{name: "second epoch fine, nothing lost", bad: nil, images: 2 * 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &damagedSource{SliceSource: SliceSource{Rows: rows, BlockSize: 4}, bad: tc.bad}
			cfg := testConfig()
			cfg.BatchSize, cfg.Epochs, cfg.CloseMosaic = 1, 2, 0
			cfg.Augment.Mosaic = tc.mosaic
			l, err := New(context.Background(), src, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var images, batches int64
			for {
				rec, err := l.Next(context.Background())
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					if tc.err == "" {
						t.Fatalf("after %d batches: %v", batches, err)
					}
					if !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "epoch 0") {
						t.Errorf("error %q: want it to name epoch 0 and %q", err, tc.err)
					}
					return
				}
				if rec.NumRows() == 0 {
					t.Errorf("batch %d has no rows", batches)
				}
				images += rec.NumRows()
				batches++
				rec.Release()
			}
			if tc.err != "" {
				t.Fatalf("a stream where nothing can be read ended with EOF after %d batches", batches)
			}
			if images != tc.images {
				t.Errorf("%d images delivered, want %d", images, tc.images)
			}
			if st := l.State(); st.Epoch != 2 || st.Consumed != 0 {
				t.Errorf("state after the stream %+v, want the start of epoch 2", st)
			}
		})
	}
}
