package pipeline

import (
	"maps"
	"sync/atomic"
	"time"
)

type counters struct {
	read, decode, augment, raster, collate, stall atomic.Int64 // nanoseconds
	batches, images, dropped, crowd, emptied      atomic.Int64
	decodes, hits                                 atomic.Int64 // this loader's cache lookups
}

// StatsSource is a batch stream that keeps its loader's statistics: a
// Loader, and what wraps one (a remote stream does not: its loader's
// statistics stay in the server).
type StatsSource interface{ Stats() Stats }

// SkipsOf returns the skip summary of a batch stream that keeps
// statistics (StatsSource); false for one that does not.
func SkipsOf(b Batches) (SkipSummary, bool) {
	st, ok := b.(StatsSource)
	if !ok {
		return SkipSummary{}, false
	}
	return st.Stats().Summary(), true
}

// Stats is a snapshot of a loader's work so far. Stage times are summed
// over the goroutines doing them (so they can exceed Wall); Stall is the
// time the consumer spent inside Next waiting for a batch.
type Stats struct {
	Batches, Images int64
	Wall            time.Duration // since the first Next
	ImagesPerSec    float64

	Read, Decode, Augment, Raster, Collate time.Duration
	Stall                                  time.Duration

	Decodes   int64 // JPEG/PNG decodes (the decoded-image cache misses)
	CacheHits int64
	// DecodesPerImage is Decodes / Images: 1 means every source image was
	// decoded once although a mosaic uses four.
	DecodesPerImage float64

	Dropped      int64            // instances removed by the candidate rule
	CrowdDropped int64            // crowd instances left out (augment.Config.KeepCrowd)
	Skipped      map[string]int64 // samples/partners skipped, by reason
	// Emptied is the number of batches that lost every sample to skips:
	// Next went on to the next batch instead of returning them.
	Emptied int64

	PoolAllocs, PoolReuses int64 // batch buffers newly allocated vs reused
}

// Stats returns a snapshot.
func (l *Loader) Stats() Stats {
	allocs, reuses := l.mem.Counts()
	s := Stats{
		Batches: l.st.batches.Load(), Images: l.st.images.Load(), Emptied: l.st.emptied.Load(),
		Read: time.Duration(l.st.read.Load()), Decode: time.Duration(l.st.decode.Load()),
		Augment: time.Duration(l.st.augment.Load()), Raster: time.Duration(l.st.raster.Load()),
		Collate: time.Duration(l.st.collate.Load()), Stall: time.Duration(l.st.stall.Load()),
		Dropped: l.st.dropped.Load(), CrowdDropped: l.st.crowd.Load(),
		PoolAllocs: allocs, PoolReuses: reuses,
	}
	if t := l.start.Load(); t != 0 {
		s.Wall = time.Since(time.Unix(0, t))
	}
	s.Decodes, s.CacheHits = l.st.decodes.Load(), l.st.hits.Load()
	if s.Images > 0 {
		s.DecodesPerImage = float64(s.Decodes) / float64(s.Images)
	}
	if s.Wall > 0 {
		s.ImagesPerSec = float64(s.Images) / s.Wall.Seconds()
	}
	l.skipMu.Lock()
	s.Skipped = maps.Clone(l.skipped)
	l.skipMu.Unlock()
	return s
}
