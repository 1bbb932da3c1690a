package shard

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/segpipe/segpipe/formats/storage"
)

// Set is an opened shard directory (a local one or a bucket prefix, see
// formats/storage): its manifest and the means to stream its rows. A Set
// holds no open files; each ShardReader does.
type Set struct {
	Dir      string // the location, as opened
	Manifest *Manifest

	store *storage.Dir
}

// Open reads manifest.json at dir, a path or a URL (file://, s3://, gs://,
// azblob://) opened with storage.DefaultOptions. It does not touch the
// shards: use Verify to check them, OpenShard or Batches/Images to read
// them.
func Open(dir string) (*Set, error) { return OpenContext(context.Background(), dir) }

// OpenContext is Open with a context that bounds reading the manifest:
// a bucket that stops answering fails it when ctx ends.
func OpenContext(ctx context.Context, dir string) (*Set, error) {
	d, err := storage.Open(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	return openDir(ctx, d)
}

// Path returns the path or URL of the i-th shard.
func (s *Set) Path(i int) string { return s.store.Join(s.Manifest.Shards[i].File) }

// ReadOptions configures how shards are read.
type ReadOptions struct {
	// Columns restricts reading to these top-level columns (Col*
	// constants), in schema order whatever the order given. Nil reads all.
	// Leaving out ColImage makes annotation-only scans cheap.
	Columns []string
	// Allocator for record batches; default memory.DefaultAllocator.
	Allocator memory.Allocator
}

// ShardReader reads one shard a row group at a time. It is not safe for
// concurrent use; open one per goroutine.
type ShardReader struct {
	name   string
	f      *storage.File
	pf     *file.Reader
	fr     *pqarrow.FileReader
	leaves []int // Parquet leaf columns of the requested top-level columns
	schema *arrow.Schema
	// version is the shard's format version (MinFormatVersion to
	// FormatVersion).
	version int
	mem     memory.Allocator
	// imgLeaf is the image column's leaf when its chunks may be read
	// directly (imagecol.go), else -1.
	imgLeaf int
}

// OpenShard opens the i-th shard of the set.
func (s *Set) OpenShard(i int, opts ReadOptions) (*ShardReader, error) {
	return s.OpenShardContext(context.Background(), i, opts)
}

// OpenShardContext is OpenShard with a context that bounds reading the
// shard's footer.
func (s *Set) OpenShardContext(ctx context.Context, i int, opts ReadOptions) (*ShardReader, error) {
	if i < 0 || i >= len(s.Manifest.Shards) {
		return nil, fmt.Errorf("shard index %d out of range [0,%d)", i, len(s.Manifest.Shards))
	}
	// A size check is one stat: it catches truncated and replaced files
	// before the Parquet reader meets them (Verify also checks sha256).
	info := s.Manifest.Shards[i]
	f, err := s.store.OpenFile(ctx, info.File)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", info.File, err)
	} else if f.Size() != info.Bytes {
		f.Close()
		return nil, fmt.Errorf("shard %s: %d bytes, manifest says %d: the file was changed or damaged after conversion", info.File, f.Size(), info.Bytes)
	}
	return openShardReader(f, opts)
}

// OpenShardFile opens one shard file directly, without a manifest; path
// is a path or a URL.
func OpenShardFile(path string, opts ReadOptions) (*ShardReader, error) {
	f, err := openStorageFile(path)
	if err != nil {
		return nil, err
	}
	return openShardReader(f, opts)
}

func openShardReader(f *storage.File, opts ReadOptions) (r *ShardReader, err error) {
	name := f.Name()
	// A damaged file must be an error naming it, even where the Parquet
	// library would panic on it.
	defer func() {
		if p := recover(); p != nil {
			f.Close()
			r, err = nil, fmt.Errorf("shard %s: unreadable Parquet footer or schema: %v", name, p)
		}
	}()
	return openShardFile(f, name, opts)
}

func openShardFile(f *storage.File, name string, opts ReadOptions) (*ShardReader, error) {
	mem := opts.Allocator
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	r := &ShardReader{name: name, f: f}
	fail := func(err error) (*ShardReader, error) {
		f.Close()
		return nil, fmt.Errorf("shard %s: %w", name, err)
	}
	var err error
	rp := parquet.NewReaderProperties(mem)
	// Stream pages instead of loading a whole column chunk, so memory
	// tracks the decoded batch rather than twice the row group.
	rp.BufferedStreamEnabled = true
	rp.BufferSize = 1 << 20
	r.pf, err = file.NewParquetReader(f, file.WithReadProps(rp))
	if err != nil {
		return fail(err)
	}
	if err := checkChunkBounds(r.pf, f.Size()); err != nil {
		return fail(err)
	}
	kv := r.pf.MetaData().KeyValueMetadata()
	v := kv.FindValue(MetadataKeyFormatVersion)
	if v == nil {
		return fail(fmt.Errorf("not a segpipe shard: no %s metadata", MetadataKeyFormatVersion))
	}
	r.version, err = strconv.Atoi(*v)
	if err != nil || r.version < MinFormatVersion || r.version > FormatVersion {
		return fail(fmt.Errorf("format_version %s: this segpipe reads versions %d to %d", *v, MinFormatVersion, FormatVersion))
	}
	want := schemaOf(r.version)
	guardStoredSchema(kv, want)
	// PreAllocBinaryData sizes each binary column's buffer from the
	// footer once, instead of growing it by doubling (and zeroing and
	// copying it) image by image: that growth was a third of the loader's
	// CPU on pre-decoded shards. checkChunkBounds bounds what a damaged
	// footer can make it reserve.
	r.fr, err = pqarrow.NewFileReader(r.pf, pqarrow.ArrowReadProperties{PreAllocBinaryData: true}, mem)
	if err != nil {
		return fail(err)
	}
	full, err := r.fr.Schema()
	if err != nil {
		return fail(err)
	}
	if !sameFields(full, want) {
		return fail(fmt.Errorf("schema differs from format version %d:\n%s", r.version, full))
	}
	cols := map[string]bool{}
	for _, c := range opts.Columns {
		// A column of a later version than the shard's is simply absent
		// from its batches.
		if schema.FieldIndices(c) == nil {
			return fail(fmt.Errorf("unknown column %q", c))
		}
		cols[c] = true
	}
	var fields []arrow.Field
	for i, fld := range r.fr.Manifest.Fields {
		if opts.Columns != nil && !cols[fld.Field.Name] {
			continue
		}
		fields = append(fields, want.Field(i))
		r.leaves = appendLeaves(r.leaves, &fld)
	}
	r.schema = arrow.NewSchema(fields, nil)
	r.mem, r.imgLeaf = mem, r.imageLeaf()
	f.SetBlocks(columnRanges(r.pf, r.leaves))
	return r, nil
}

// arrowSchemaKey is the key-value metadata entry where pqarrow stores the
// Arrow schema it wrote.
const arrowSchemaKey = "ARROW:schema"

// guardStoredSchema keeps arrow-go from parsing a stored Arrow schema that
// is not the one this format version writes. arrow-go trusts that
// flatbuffer: one damaged length in it makes it allocate hundreds of
// gigabytes and the runtime kill the process (found by FuzzShardFile).
// When the stored value differs from this build's own serialisation of
// want, the entry is hidden from pqarrow, which then derives the Arrow
// schema from the Parquet schema; sameFields checks the result either way,
// so a shard written by another arrow-go build still reads.
func guardStoredSchema(kv metadata.KeyValueMetadata, want *arrow.Schema) {
	expected := base64.StdEncoding.EncodeToString(flight.SerializeSchema(want, memory.DefaultAllocator))
	for _, e := range kv {
		if e.Key == arrowSchemaKey && (e.Value == nil || *e.Value != expected) {
			e.Key = arrowSchemaKey + " (ignored: not this format's schema)"
		}
	}
}

// SchemaOf returns the row schema of format version v (MinFormatVersion
// to FormatVersion; others get the current one). The returned value is
// shared and must not be modified.
func SchemaOf(v int) *arrow.Schema { return schemaOf(v) }

// schemaOf returns the row schema of a format version.
func schemaOf(version int) *arrow.Schema {
	switch version {
	case 1:
		return schemaV1
	case 2:
		return schemaV2
	}
	return schema
}

// Version is the shard's format version.
func (r *ShardReader) Version() int { return r.version }

// checkChunkBounds refuses footers whose column chunks lie outside the
// file. arrow-go trusts these numbers and, reading such a chunk, panics in
// a goroutine of its own where no recover can reach: one flipped footer
// byte would otherwise take the whole process down.
func checkChunkBounds(pf *file.Reader, size int64) error {
	md := pf.MetaData()
	for g := 0; g < md.NumRowGroups(); g++ {
		rg := md.RowGroup(g)
		if rg.NumRows() < 0 {
			return fmt.Errorf("row group %d: negative row count", g)
		}
		for c := 0; c < rg.NumColumns(); c++ {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, c, err)
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
				start = cc.DictionaryPageOffset()
			}
			n := cc.TotalCompressedSize()
			if start < 4 || n <= 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d column %d: chunk at %d+%d lies outside the %d-byte file", g, c, start, n, size)
			}
			// The reader reserves a binary column's uncompressed size up
			// front; zstd on this format's strings shrinks them far less
			// than this bound allows.
			if u := cc.TotalUncompressedSize(); u < 0 || u > maxInflation*size+1<<20 {
				return fmt.Errorf("row group %d column %d: %d uncompressed bytes claimed for a %d-byte file", g, c, u, size)
			}
		}
	}
	return nil
}

// maxInflation bounds a column chunk's uncompressed size relative to the
// file's size.
const maxInflation = 16

// sameFields compares names, types and nullability, ignoring the field
// metadata (Parquet field ids) the reader adds.
func sameFields(a, b *arrow.Schema) bool {
	if a.NumFields() != b.NumFields() {
		return false
	}
	for i := 0; i < a.NumFields(); i++ {
		x, y := a.Field(i), b.Field(i)
		if x.Name != y.Name || x.Nullable != y.Nullable || !arrow.TypeEqual(x.Type, y.Type) {
			return false
		}
	}
	return true
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if len(f.Children) == 0 {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

// Name is the shard's file name.
func (r *ShardReader) Name() string { return r.name }

// Schema is the schema of the batches ReadRowGroup returns.
func (r *ShardReader) Schema() *arrow.Schema { return r.schema }

// NumRows is the shard's row count from its footer.
func (r *ShardReader) NumRows() int64 { return r.pf.NumRows() }

// NumRowGroups is the number of row groups in the shard.
func (r *ShardReader) NumRowGroups() int { return r.pf.NumRowGroups() }

// RowGroupRows is the row count of row group i.
func (r *ShardReader) RowGroupRows(i int) int64 { return r.pf.MetaData().RowGroup(i).NumRows() }

// ReadRowGroup decodes row group i into one record batch. The caller owns
// the batch and must Release it; its buffers come from the reader's
// allocator and stay valid after the reader is closed.
func (r *ShardReader) ReadRowGroup(ctx context.Context, i int) (rec arrow.RecordBatch, err error) {
	defer func() {
		if p := recover(); p != nil {
			// rec, if any, may not be ours yet: leak it rather than
			// risk a double release.
			rec, err = nil, fmt.Errorf("shard %s row group %d: unreadable data: %v", r.name, i, p)
		}
	}()
	if i < 0 || i >= r.NumRowGroups() {
		return nil, fmt.Errorf("shard %s: row group %d out of range [0,%d)", r.name, i, r.NumRowGroups())
	}
	// The Parquet reader reads through io.ReaderAt, without ctx: bound
	// to the file, ctx still ends a stalled bucket read.
	defer r.f.Bind(ctx)()
	if r.imgLeaf >= 0 {
		rec, err = r.readDirect(ctx, i)
		if err == nil || !errors.Is(err, errNotPlainImages) {
			return rec, err
		}
	}
	rr, err := r.fr.GetRecordReader(ctx, r.leaves, []int{i})
	if err != nil {
		return nil, fmt.Errorf("shard %s row group %d: %w", r.name, i, err)
	}
	defer rr.Release()
	rec, err = rr.Read()
	if err != nil {
		return nil, fmt.Errorf("shard %s row group %d: %w", r.name, i, err)
	}
	rec.Retain()
	if rec.NumRows() != r.RowGroupRows(i) {
		rec.Release()
		return nil, fmt.Errorf("shard %s row group %d: read %d rows, footer says %d", r.name, i, rec.NumRows(), r.RowGroupRows(i))
	}
	return rec, nil
}

// readDirect reads row group i with its image chunk read directly
// (imagecol.go) and the other columns through pqarrow. It returns
// errNotPlainImages, wrapped, when the chunk is not in the layout read
// directly.
func (r *ShardReader) readDirect(ctx context.Context, i int) (arrow.RecordBatch, error) {
	n := r.RowGroupRows(i)
	if n == 0 {
		return nil, errNotPlainImages
	}
	imgs, err := r.readImageChunk(i, r.imgLeaf, n, r.mem)
	if err != nil {
		return nil, fmt.Errorf("shard %s row group %d: image column: %w", r.name, i, err)
	}
	defer imgs.Release()
	others := slices.DeleteFunc(slices.Clone(r.leaves), func(l int) bool { return l == r.imgLeaf })
	var part arrow.RecordBatch
	if len(others) > 0 {
		rr, err := r.fr.GetRecordReader(ctx, others, []int{i})
		if err != nil {
			return nil, fmt.Errorf("shard %s row group %d: %w", r.name, i, err)
		}
		defer rr.Release()
		if part, err = rr.Read(); err != nil {
			return nil, fmt.Errorf("shard %s row group %d: %w", r.name, i, err)
		}
		if part.NumRows() != n {
			return nil, fmt.Errorf("shard %s row group %d: read %d rows, footer says %d", r.name, i, part.NumRows(), n)
		}
	}
	cols := make([]arrow.Array, 0, r.schema.NumFields())
	j := 0
	for _, f := range r.schema.Fields() {
		if f.Name == ColImage {
			cols = append(cols, imgs)
			continue
		}
		if part == nil || j >= int(part.NumCols()) {
			return nil, fmt.Errorf("shard %s row group %d: %d columns read, schema has %d", r.name, i, j, r.schema.NumFields())
		}
		cols = append(cols, part.Column(j))
		j++
	}
	return array.NewRecordBatch(r.schema, cols, n), nil
}

// Close closes the shard file.
func (r *ShardReader) Close() error { return r.f.Close() }

// BatchFunc receives one row group of a shard. rec is released when the
// function returns: Retain it to keep it longer. firstRow is the index of
// rec's first row within its shard.
type BatchFunc func(shard int, firstRow int64, rec arrow.RecordBatch) error

// Batches streams every row group of every shard in manifest order,
// holding one row group in memory at a time.
func (s *Set) Batches(ctx context.Context, opts ReadOptions, fn BatchFunc) error {
	for i := range s.Manifest.Shards {
		if err := s.shardBatches(ctx, i, opts, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Set) shardBatches(ctx context.Context, i int, opts ReadOptions, fn BatchFunc) error {
	r, err := s.OpenShard(i, opts)
	if err != nil {
		return err
	}
	defer r.Close()
	var first int64
	for g := 0; g < r.NumRowGroups(); g++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, err := r.ReadRowGroup(ctx, g)
		if err != nil {
			return err
		}
		err = fn(i, first, rec)
		first += rec.NumRows()
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// RowError locates a problem in a shard.
type RowError struct {
	Shard string // file name
	Row   int64  // row index within the shard
	Err   error
}

// Error says where, then what.
func (e *RowError) Error() string { return fmt.Sprintf("shard %s row %d: %v", e.Shard, e.Row, e.Err) }

// Unwrap returns the underlying error.
func (e *RowError) Unwrap() error { return e.Err }

// Images streams every row as a decoded Image. The Image and everything it
// points to (Bytes included, which aliases the batch) is only valid during
// fn: copy what must outlive it. Errors from decoding or from fn are
// wrapped in a *RowError naming the shard and row.
func (s *Set) Images(ctx context.Context, opts ReadOptions, fn func(*Image) error) error {
	var img Image
	var d Decoder
	return s.Batches(ctx, opts, func(sh int, first int64, rec arrow.RecordBatch) error {
		if err := d.Reset(rec); err != nil {
			return &RowError{Shard: s.Manifest.Shards[sh].File, Row: first, Err: err}
		}
		for row := 0; row < int(rec.NumRows()); row++ {
			err := d.Decode(row, &img)
			if err == nil {
				err = fn(&img)
			}
			if err != nil {
				var re *RowError
				if errors.As(err, &re) {
					return err
				}
				return &RowError{Shard: s.Manifest.Shards[sh].File, Row: first + int64(row), Err: err}
			}
		}
		return nil
	})
}
