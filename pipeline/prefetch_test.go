package pipeline

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
)

// scheduleSource records what the loader announces and what it reads.
type scheduleSource struct {
	SliceSource
	mu        sync.Mutex
	announced []int
	reads     []int
}

func (s *scheduleSource) Prefetch(blocks []int) {
	s.mu.Lock()
	s.announced = append(s.announced, blocks...)
	s.mu.Unlock()
}

func (s *scheduleSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	s.mu.Lock()
	s.reads = append(s.reads, i)
	s.mu.Unlock()
	return s.SliceSource.ReadBlock(ctx, i)
}

// TestLoaderAnnouncesItsReads: every block the loader reads was announced
// to a Prefetcher before, in reading order, and at most two windows ahead;
// the announcement changes no batch.
func TestLoaderAnnouncesItsReads(t *testing.T) {
	rows := synth(t, 40, 0)
	src := &scheduleSource{SliceSource: SliceSource{Rows: rows, BlockSize: 4}}
	got := run(t, src, testConfig(), -1)
	defer got.release()
	want := run(t, &SliceSource{Rows: rows, BlockSize: 4}, testConfig(), -1)
	defer want.release()
	equalRuns(t, want.recs, got.recs)

	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.reads) == 0 {
		t.Fatal("no block read")
	}
	// The announcements, in order, are the reads in order.
	if !slices.Equal(src.announced[:len(src.reads)], src.reads) {
		t.Fatalf("announced %v, read %v", src.announced, src.reads)
	}
	if extra := len(src.announced) - len(src.reads); extra < 0 || extra > 2*16/4 {
		t.Fatalf("%d blocks announced beyond those read", extra)
	}
}
