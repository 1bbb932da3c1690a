package shard

import (
	"context"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/segpipe/segpipe/formats/storage"
)

// OpenDir reads the manifest of a shard directory already opened through
// formats/storage (a local directory or a bucket prefix).
func OpenDir(d *storage.Dir) (*Set, error) {
	m, err := readManifest(context.Background(), d)
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
		cc, err := rg.ColumnChunk(c)
		if err != nil {
			return storage.Range{}
		}
		start := cc.DataPageOffset()
		if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
			start = cc.DictionaryPageOffset()
		}
		if lo < 0 || start < lo {
			lo = start
		}
		hi = max(hi, start+cc.TotalCompressedSize())
	}
	if lo < 0 {
		return storage.Range{}
	}
	return storage.Range{Off: lo, Len: hi - lo}
}

// rowGroupRanges lists every row group's range for storage.File.SetBlocks,
// which fetches a row group in one request; nil if they are not in file
// order (then reads go to the store as the Parquet reader asks).
func rowGroupRanges(pf *file.Reader) []storage.Range {
	out := make([]storage.Range, pf.NumRowGroups())
	for g := range out {
		out[g] = rowGroupRange(pf, g)
		if out[g].Len <= 0 || g > 0 && out[g].Off < out[g-1].End() {
			return nil
		}
	}
	return out
}
