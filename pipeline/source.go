package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/formats/storage"
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
//
// Damage is contained to what is damaged: a shard that cannot be opened
// becomes one block of its manifest row count whose rows are all skipped
// (SkipBadShard); a row group that fails to read or decompress has all its
// rows skipped (SkipBadRowGroup); a row whose image bytes fail their
// checksum (SkipImageChecksum) or whose columns are inconsistent
// (SkipBadRow) is skipped alone. Each is logged once with the shard and
// row range and reported to the loader as a *Damage. A shard that the
// manifest lists but that does not exist is not damage but an incomplete
// set; it is skipped and counted as SkipBadShard like any other shard
// that cannot be opened (a 0-byte file, a directory in its place).
type ShardSource struct {
	set    *shard.Set
	blocks []shardBlock
	rows   []int
	broken map[int]error // shards that could not be opened
	ahead  readAhead

	mu     sync.Mutex
	open   *shard.ShardReader
	openID int
}

type shardBlock struct {
	shard, group int
	first        int64 // first row within the shard
}

// OpenShards opens the shard directory dir, a path or a URL (s3://, gs://,
// azblob://, file://; see formats/storage), through its manifest and reads
// every shard's footer to learn its row groups. Storage options (cache,
// read-ahead, retries) are storage.DefaultOptions. Only a missing or
// invalid manifest, or one that lists no rows (an error wrapping
// ErrEmptySet), is an error.
func OpenShards(dir string) (*ShardSource, error) {
	return OpenShardsContext(context.Background(), dir)
}

// OpenShardsContext is OpenShards with a context that bounds the reads of
// the manifest and the footers: a bucket that stops answering fails it
// when ctx ends (reads of row groups take the context of ReadBlock).
func OpenShardsContext(ctx context.Context, dir string) (*ShardSource, error) {
	set, err := shard.OpenContext(ctx, dir)
	if err != nil {
		return nil, err
	}
	s := &ShardSource{set: set, openID: -1, broken: map[int]error{}}
	for i, info := range set.Manifest.Shards {
		r, err := set.OpenShardContext(ctx, i, shard.ReadOptions{})
		if ctx.Err() != nil {
			return nil, fmt.Errorf("shard set %s: %w", dir, ctx.Err())
		}
		if err != nil {
			// A missing file is damage like a 0-byte one or a directory in
			// its place: one rule for every shard that cannot be opened,
			// each skipped and counted, and a set where none opens fails
			// at its first epoch with the shards named.
			if errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("shard %s listed in the manifest is missing: %w", info.File, err)
			}
			slog.Warn("skipping unreadable shard", "shard", info.File, "rows", fmt.Sprintf("0-%d", info.Rows-1),
				"reason", SkipBadShard, "err", err)
			s.broken[i] = err
			if info.Rows > 0 {
				s.blocks = append(s.blocks, shardBlock{shard: i, group: -1})
				s.rows = append(s.rows, int(info.Rows))
				s.ahead.ranges = append(s.ahead.ranges, storage.Range{}) // nothing to fetch
			}
			continue
		}
		var first int64
		for g := 0; g < r.NumRowGroups(); g++ {
			n := r.RowGroupRows(g)
			s.blocks = append(s.blocks, shardBlock{i, g, first})
			s.rows = append(s.rows, int(n))
			s.ahead.ranges = append(s.ahead.ranges, r.RowGroupRange(g))
			first += n
		}
		r.Close()
	}
	var rows int
	for _, n := range s.rows {
		rows += n
	}
	if rows == 0 {
		// A run over it would succeed with nothing.
		return nil, fmt.Errorf("shard set %s: %w", dir, ErrEmptySet)
	}
	return s, nil
}

// Manifest returns the shard set's manifest.
func (s *ShardSource) Manifest() *shard.Manifest { return s.set.Manifest }

// Location returns the shard set's path or URL, as opened.
func (s *ShardSource) Location() string { return s.set.Dir }

// BlockRows implements Source.
func (s *ShardSource) BlockRows() []int { return s.rows }

// ReadBlock implements Source. Rows alias the row group's Arrow buffers,
// which come from a Go allocator: they stay valid for as long as the rows
// are referenced, and the garbage collector frees them afterwards. Damaged
// rows come back empty with a *Damage error (see ShardSource).
func (s *ShardSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	if i < 0 || i >= len(s.blocks) {
		return nil, fmt.Errorf("block %d out of range [0,%d)", i, len(s.blocks))
	}
	b := s.blocks[i]
	file := s.set.Manifest.Shards[b.shard].File
	n := s.rows[i]
	where := fmt.Sprintf("shard %s row group %d (rows %d-%d)", file, b.group, b.first, b.first+int64(n)-1)
	whole := func(reason string, err error) ([]shard.Image, error) {
		d := &Damage{Where: where, Rows: make([]BadRow, n)}
		for r := range d.Rows {
			d.Rows[r] = BadRow{Row: r, Reason: reason, Err: err}
		}
		return make([]shard.Image, n), d
	}
	if err := s.broken[b.shard]; err != nil {
		d := &Damage{Where: fmt.Sprintf("shard %s (rows 0-%d)", file, n-1)}
		for r := 0; r < n; r++ {
			d.Rows = append(d.Rows, BadRow{Row: r, Reason: SkipBadShard, Err: err})
		}
		return make([]shard.Image, n), d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ahead.reading(s, i)
	if s.openID != b.shard {
		s.closeOpen()
		r, err := s.set.OpenShardContext(ctx, b.shard, shard.ReadOptions{Allocator: memory.NewGoAllocator()})
		if err != nil && ctx.Err() != nil {
			return nil, err // stopped, not damaged
		}
		if err != nil {
			// It opened when the source was made: changed since.
			slog.Warn("skipping unreadable shard", "shard", file, "reason", SkipBadShard, "err", err)
			return whole(SkipBadShard, err)
		}
		s.open, s.openID = r, b.shard
	}
	rec, err := s.open.ReadRowGroup(ctx, b.group)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		// The reader may be left in any state by damaged pages: start
		// the next block from a fresh one.
		s.closeOpen()
		slog.Warn("skipping damaged row group", "shard", file, "row_group", b.group,
			"rows", fmt.Sprintf("%d-%d", b.first, b.first+int64(n)-1), "reason", SkipBadRowGroup, "err", err)
		return whole(SkipBadRowGroup, err)
	}
	defer rec.Release()
	var d shard.Decoder
	if err := d.Reset(rec); err != nil {
		slog.Warn("skipping damaged row group", "shard", file, "row_group", b.group,
			"rows", fmt.Sprintf("%d-%d", b.first, b.first+int64(n)-1), "reason", SkipBadRowGroup, "err", err)
		return whole(SkipBadRowGroup, err)
	}
	rows := make([]shard.Image, d.Len())
	var dmg *Damage
	for r := range rows {
		if err := d.Decode(r, &rows[r]); err != nil {
			bad := BadRow{Row: r, Reason: SkipBadRow, Err: fmt.Errorf("shard %s row %d: %w", file, b.first+int64(r), err)}
			attrs := []any{"shard", file, "row_group", b.group, "row", b.first + int64(r)}
			// Only a checksum failure is known to come after a sound id.
			if ce, ok := errors.AsType[*shard.ChecksumError](err); ok {
				bad.Reason, bad.ImageID, bad.HasImageID = SkipImageChecksum, ce.ImageID, true
				attrs = append(attrs, "image_id", ce.ImageID)
			} else if errors.Is(err, shard.ErrImageChecksum) {
				bad.Reason = SkipImageChecksum
			}
			slog.Warn("skipping damaged row", append(attrs, "reason", bad.Reason, "err", err)...)
			rows[r] = shard.Image{}
			if dmg == nil {
				dmg = &Damage{Where: where}
			}
			dmg.Rows = append(dmg.Rows, bad)
		}
	}
	if dmg != nil {
		return rows, dmg
	}
	return rows, nil
}

func (s *ShardSource) closeOpen() {
	if s.open != nil {
		s.open.Close()
		s.open = nil
	}
	s.openID = -1
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

// Manifest is the repeated source's manifest, nil when it has none: the
// copies share its categories.
func (r *repeatSource) Manifest() *shard.Manifest {
	if ms, ok := r.src.(interface{ Manifest() *shard.Manifest }); ok {
		return ms.Manifest()
	}
	return nil
}

// ReadBlock implements Source by reading the block's original.
func (r *repeatSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	return r.src.ReadBlock(ctx, i%len(r.src.BlockRows()))
}

// EncodedBytes implements EncodedSource: the shards' bytes in the manifest.
func (s *ShardSource) EncodedBytes() int64 { return s.set.Manifest.Bytes }

// EncodedBytes implements EncodedSource: n copies of the repeated
// source's bytes, since each copy is read separately; 0 (unknown) when
// that source does not say.
func (r *repeatSource) EncodedBytes() int64 {
	if es, ok := r.src.(EncodedSource); ok {
		return int64(r.n) * es.EncodedBytes()
	}
	return 0
}

// FractionRows is how many rows Config.Fraction keeps of a source of rows
// rows: max(1, round(rows·fraction)) with halves rounded to even, as
// Ultralytics counts the images of its fraction (Python's round), and all
// of them for a fraction of 0 (unset) or at least 1.
func FractionRows(rows int, fraction float64) int {
	if fraction <= 0 || fraction >= 1 || rows == 0 {
		return rows
	}
	return min(rows, max(1, int(math.RoundToEven(float64(rows)*fraction))))
}

// Subset returns src as a loader with configuration c reads it: its first
// FractionRows(rows, c.Fraction) rows in storage order (manifest order for
// a shard set: shards as listed, rows as stored), or src itself when that
// is all of them. Row indices are unchanged, so a decoded-image cache
// shared with a loader over all of src stays valid.
func (c Config) Subset(src Source) Source {
	blocks := src.BlockRows()
	var rows int
	for _, n := range blocks {
		rows += n
	}
	keep := FractionRows(rows, c.Fraction)
	if keep == rows {
		return src
	}
	cut := slices.Clone(blocks)
	left := keep
	for i, n := range cut {
		if left < n {
			cut[i], cut = left, cut[:i+1]
			break
		}
		left -= n
	}
	return &prefixSource{src: src, blocks: cut, rows: rows, keep: keep}
}

// prefixSource is the first keep of a source's rows: its blocks, the last
// one kept cut short (blocks[len-1] rows of it), the rest left out.
type prefixSource struct {
	src        Source
	blocks     []int
	rows, keep int
}

// BlockRows implements Source.
func (p *prefixSource) BlockRows() []int { return p.blocks }

// ReadBlock implements Source: the rows of the kept blocks, the last one
// cut, with the damage reported for rows beyond the cut left out.
func (p *prefixSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	if i < 0 || i >= len(p.blocks) {
		return nil, fmt.Errorf("block %d out of range [0,%d)", i, len(p.blocks))
	}
	rows, err := p.src.ReadBlock(ctx, i)
	n := p.blocks[i]
	if len(rows) <= n {
		return rows, err
	}
	rows = rows[:n]
	if dmg, ok := errors.AsType[*Damage](err); ok {
		kept := &Damage{Where: dmg.Where}
		for _, br := range dmg.Rows {
			if br.Row < n {
				kept.Rows = append(kept.Rows, br)
			}
		}
		if len(kept.Rows) == 0 {
			return rows, nil
		}
		return rows, kept
	}
	return rows, err
}

// Manifest is the source's manifest, nil when it has none: the subset
// keeps its categories.
func (p *prefixSource) Manifest() *shard.Manifest {
	if ms, ok := p.src.(interface{ Manifest() *shard.Manifest }); ok {
		return ms.Manifest()
	}
	return nil
}

// Location is the source's location, "" when it has none.
func (p *prefixSource) Location() string {
	if ls, ok := p.src.(interface{ Location() string }); ok {
		return ls.Location()
	}
	return ""
}

// EncodedBytes implements EncodedSource: the source's bytes pro rata of
// the rows kept, 0 (unknown) when the source does not say.
func (p *prefixSource) EncodedBytes() int64 {
	if es, ok := p.src.(EncodedSource); ok {
		return es.EncodedBytes() * int64(p.keep) / int64(p.rows)
	}
	return 0
}

// Prefetch implements Prefetcher: the kept blocks keep their indices.
func (p *prefixSource) Prefetch(blocks []int) {
	if pf, ok := p.src.(Prefetcher); ok {
		pf.Prefetch(blocks)
	}
}
