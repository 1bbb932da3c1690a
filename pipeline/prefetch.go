package pipeline

import (
	"github.com/segpipe/segpipe/formats/storage"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Prefetcher is implemented by a Source that can fetch blocks ahead of
// ReadBlock (a shard set in a bucket). The loader tells it, one window
// ahead, which blocks it will read and in what order, so that a shuffled
// read never waits on the network for a block it could have asked for.
type Prefetcher interface {
	// Prefetch adds blocks, in the order they will be read, to the
	// source's schedule. It must not block.
	Prefetch(blocks []int)
}

// prefetch hands the source the blocks of window wi+1 (and of wi itself
// when reading starts there).
func (l *Loader) prefetch(ep *order.Epoch, wi int, first bool) {
	p, ok := l.src.(Prefetcher)
	if !ok {
		return
	}
	if first {
		p.Prefetch(ep.Windows[wi].Blocks)
	}
	if wi+1 < len(ep.Windows) {
		p.Prefetch(ep.Windows[wi+1].Blocks)
	}
}

// readAhead is a ShardSource's schedule of blocks to fetch ahead: each
// ReadBlock drops the blocks up to the one read and asks the storage for
// the next ones, which starts as many as its read-ahead budget allows.
type readAhead struct {
	ranges   []storage.Range // byte range of every block
	schedule []int
}

// maxSchedule bounds the schedule of a source that is told more than it
// reads (blocks are dropped oldest first).
const maxSchedule = 1 << 12

// Prefetch implements Prefetcher.
func (s *ShardSource) Prefetch(blocks []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range blocks {
		if b >= 0 && b < len(s.blocks) {
			s.ahead.schedule = append(s.ahead.schedule, b)
		}
	}
	if n := len(s.ahead.schedule); n > maxSchedule {
		s.ahead.schedule = append(s.ahead.schedule[:0], s.ahead.schedule[n-maxSchedule:]...)
	}
	s.ahead.issue(s)
}

// reading is called with s.mu held as block i is read.
func (a *readAhead) reading(s *ShardSource, i int) {
	for k, b := range a.schedule {
		if b == i {
			a.schedule = a.schedule[k+1:]
			break
		}
	}
	a.issue(s)
}

func (a *readAhead) issue(s *ShardSource) {
	st := s.set.Storage()
	for _, b := range a.schedule {
		if a.ranges[b].Len == 0 {
			continue // an unreadable shard: nothing to fetch
		}
		if !st.Prefetch(s.set.Manifest.Shards[s.blocks[b].shard].File, a.ranges[b]) {
			return
		}
	}
}

// Prefetch implements Prefetcher for the repeated blocks.
func (r *repeatSource) Prefetch(blocks []int) {
	p, ok := r.src.(Prefetcher)
	if !ok {
		return
	}
	n := len(r.src.BlockRows())
	orig := make([]int, len(blocks))
	for i, b := range blocks {
		orig[i] = b % n
	}
	p.Prefetch(orig)
}
