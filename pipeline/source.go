package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/shard"
)

// Source is a dataset stored as blocks (Parquet row groups) that are read
// whole. Rows are numbered across blocks in storage order. Implementations
// need not be safe for concurrent use: the loader reads from one goroutine.
type Source interface {
	// BlockRows returns the row count of every block, in storage order.
	BlockRows() []int
	// ReadBlock returns the rows of block i. The loader keeps the returned
	// rows (and what they point to) until it no longer needs them and does
	// not modify them; the source must not reuse their memory.
	ReadBlock(ctx context.Context, i int) ([]shard.Image, error)
}

// SliceSource is an in-memory Source: Rows split into blocks of BlockSize
// rows (default 64). Useful for tests and small synthetic datasets.
type SliceSource struct {
	Rows      []shard.Image
	BlockSize int
}

func (s *SliceSource) size() int {
	if s.BlockSize <= 0 {
		return 64
	}
	return s.BlockSize
}

// BlockRows implements Source.
func (s *SliceSource) BlockRows() []int {
	var out []int
	for i := 0; i < len(s.Rows); i += s.size() {
		out = append(out, min(s.size(), len(s.Rows)-i))
	}
	return out
}

// ReadBlock implements Source.
func (s *SliceSource) ReadBlock(_ context.Context, i int) ([]shard.Image, error) {
	lo := i * s.size()
	if i < 0 || lo >= len(s.Rows) {
		return nil, fmt.Errorf("block %d out of range", i)
	}
	return s.Rows[lo:min(lo+s.size(), len(s.Rows))], nil
}

// ShardSource reads a shard directory (formats/shard) block by block: one
// block per row group of every shard, in manifest order.
type ShardSource struct {
	set    *shard.Set
	blocks []shardBlock
	rows   []int
	ahead  readAhead

	mu     sync.Mutex
	open   *shard.ShardReader
	openID int
}

type shardBlock struct{ shard, group int }

// OpenShards opens the shard directory dir, a path or a URL (s3://, gs://,
// azblob://, file://; see formats/storage), through its manifest and reads
// every shard's footer to learn its row groups. Storage options (cache,
// read-ahead, retries) are storage.DefaultOptions.
func OpenShards(dir string) (*ShardSource, error) {
	set, err := shard.Open(dir)
	if err != nil {
		return nil, err
	}
	s := &ShardSource{set: set, openID: -1}
	for i := range set.Manifest.Shards {
		r, err := set.OpenShard(i, shard.ReadOptions{})
		if err != nil {
			return nil, err
		}
		for g := 0; g < r.NumRowGroups(); g++ {
			s.blocks = append(s.blocks, shardBlock{i, g})
			s.rows = append(s.rows, int(r.RowGroupRows(g)))
			s.ahead.ranges = append(s.ahead.ranges, r.RowGroupRange(g))
		}
		r.Close()
	}
	return s, nil
}

// Manifest returns the shard set's manifest.
func (s *ShardSource) Manifest() *shard.Manifest { return s.set.Manifest }

// BlockRows implements Source.
func (s *ShardSource) BlockRows() []int { return s.rows }

// ReadBlock implements Source. Rows alias the row group's Arrow buffers,
// which come from a Go allocator: they stay valid for as long as the rows
// are referenced, and the garbage collector frees them afterwards.
func (s *ShardSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	if i < 0 || i >= len(s.blocks) {
		return nil, fmt.Errorf("block %d out of range [0,%d)", i, len(s.blocks))
	}
	b := s.blocks[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahead.reading(s, i)
	if s.openID != b.shard {
		if s.open != nil {
			s.open.Close()
			s.open = nil
		}
		r, err := s.set.OpenShard(b.shard, shard.ReadOptions{Allocator: memory.NewGoAllocator()})
		if err != nil {
			return nil, err
		}
		s.open, s.openID = r, b.shard
	}
	rec, err := s.open.ReadRowGroup(ctx, b.group)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	var d shard.Decoder
	if err := d.Reset(rec); err != nil {
		return nil, fmt.Errorf("shard %s row group %d: %w", s.open.Name(), b.group, err)
	}
	rows := make([]shard.Image, d.Len())
	for r := range rows {
		if err := d.Decode(r, &rows[r]); err != nil {
			// A bad row becomes an empty one that the loader skips and
			// counts (reason "bad_row"); reading goes on.
			slog.Warn("skipping bad row", "shard", s.open.Name(), "row_group", b.group, "row", r, "reason", err.Error())
			rows[r] = shard.Image{}
		}
	}
	return rows, nil
}

// Close closes the open shard file.
func (s *ShardSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil {
		err := s.open.Close()
		s.open = nil
		return err
	}
	return nil
}

// Repeat returns src with its blocks repeated n times (n ≥ 1): a dataset n
// times as long whose copies are distinct rows (decoded separately). Used
// to size benchmarks.
func Repeat(src Source, n int) Source {
	if n <= 1 {
		return src
	}
	return &repeatSource{src: src, n: n}
}

type repeatSource struct {
	src Source
	n   int
}

// BlockRows implements Source: the blocks of src, n times over.
func (r *repeatSource) BlockRows() []int {
	b := r.src.BlockRows()
	out := make([]int, 0, len(b)*r.n)
	for i := 0; i < r.n; i++ {
		out = append(out, b...)
	}
	return out
}

// ReadBlock implements Source by reading the block's original.
func (r *repeatSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	return r.src.ReadBlock(ctx, i%len(r.src.BlockRows()))
}
