package shard

import (
	"cmp"
	"context"
	"slices"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/segpipe/segpipe/formats/storage"
)

// OpenDir reads the manifest of a shard directory already opened through
// formats/storage (a local directory or a bucket prefix).
func OpenDir(d *storage.Dir) (*Set, error) { return openDir(context.Background(), d) }

func openDir(ctx context.Context, d *storage.Dir) (*Set, error) {
	m, err := readManifest(ctx, d)
	if err != nil {
		return nil, err
	}
	return &Set{Dir: d.String(), Manifest: m, store: d}, nil
}

// Storage returns the storage the set is read from.
func (s *Set) Storage() *storage.Dir { return s.store }

// openStorageFile opens one file given by path or URL.
func openStorageFile(location string) (*storage.File, error) {
	d, name, err := storage.OpenParent(context.Background(), location, nil)
	if err != nil {
		return nil, err
	}
	f, err := d.OpenFile(context.Background(), name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// RowGroupRange returns the byte range of row group i: from its first
// column chunk's first page to the end of its last chunk. Reading a row
// group reads exactly this range.
func (r *ShardReader) RowGroupRange(i int) storage.Range { return rowGroupRange(r.pf, i) }

func rowGroupRange(pf *file.Reader, g int) storage.Range {
	rg := pf.MetaData().RowGroup(g)
	var lo, hi int64 = -1, 0
	for c := 0; c < rg.NumColumns(); c++ {
		r, err := chunkRange(rg, c)
		if err != nil {
			return storage.Range{}
		}
		if lo < 0 || r.Off < lo {
			lo = r.Off
		}
		hi = max(hi, r.End())
	}
	if lo < 0 {
		return storage.Range{}
	}
	return storage.Range{Off: lo, Len: hi - lo}
}

// columnRanges lists, row group by row group, the byte ranges of the
// chunks of the given leaf columns, adjacent chunks of a row group merged: what
// storage.File.SetBlocks fetches in one request each. Reading every column
// gives one range per row group (RowGroupRange); an annotation-only read
// skips the image bytes. Nil if the chunks are not in file order (then
// reads go to the store as the Parquet reader asks).
func columnRanges(pf *file.Reader, leaves []int) []storage.Range {
	var out []storage.Range
	for g := 0; g < pf.NumRowGroups(); g++ {
		rg := pf.MetaData().RowGroup(g)
		var chunks []storage.Range
		for _, c := range leaves {
			r, err := chunkRange(rg, c)
			if err != nil {
				return nil
			}
			chunks = append(chunks, r)
		}
		slices.SortFunc(chunks, func(a, b storage.Range) int { return cmp.Compare(a.Off, b.Off) })
		first := len(out) // chunks merge within a row group, never across
		for _, c := range chunks {
			if n := len(out); n > first && c.Off == out[n-1].End() {
				out[n-1].Len += c.Len
				continue
			}
			if n := len(out); c.Len <= 0 || n > 0 && c.Off < out[n-1].End() {
				return nil
			}
			out = append(out, c)
		}
	}
	return out
}

// chunkRange is the byte range of column chunk c: from its dictionary page
// (if any, and first) or first data page, for its compressed size.
func chunkRange(rg *metadata.RowGroupMetaData, c int) (storage.Range, error) {
	cc, err := rg.ColumnChunk(c)
	if err != nil {
		return storage.Range{}, err
	}
	start := cc.DataPageOffset()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
		start = cc.DictionaryPageOffset()
	}
	return storage.Range{Off: start, Len: cc.TotalCompressedSize()}, nil
}
