package shard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/storage"
)

// Default sizes of WriterOptions.
const (
	// DefaultShardBytes keeps a shard large enough that opening it is
	// negligible next to reading it, and small enough that a few of them
	// spread over readers and machines.
	DefaultShardBytes = 256 << 20
	// DefaultRowGroupBytes is the unit a streaming reader holds in memory
	// at once: about a hundred COCO-sized images, so eight parallel readers
	// with one row group of read-ahead each stay near 256 MiB, while every
	// read is still a long sequential one. A 256 MiB shard has ~16 row
	// groups, which a shuffling loader can visit in any order.
	DefaultRowGroupBytes = 16 << 20
)

// ProgressName is the journal a Writer keeps in the output directory while
// a conversion runs. It lists the finished shards so that a resumed
// conversion can continue after them; it is removed when the manifest is
// written.
const ProgressName = ".segpipe-progress.json"

// ErrComplete is returned by Create with Resume set when the directory
// already holds a finished conversion with the same options.
var ErrComplete = errors.New("conversion already complete")

// WriterOptions configures Create. Zero values take the documented
// defaults.
type WriterOptions struct {
	// ShardBytes is the target shard size: a shard is closed after the
	// row that brings its estimated size to ShardBytes or more. Default
	// DefaultShardBytes.
	ShardBytes int64
	// RowGroupBytes is the target row-group size, decided the same way.
	// Default DefaultRowGroupBytes.
	RowGroupBytes int64
	// Source and Categories are copied into the manifest.
	Source     Source
	Categories []Category
	// Resume continues the conversion recorded in the directory's
	// progress journal instead of refusing a non-empty directory.
	Resume bool
	// Checkpoint, when set, is called each time a shard is complete. What
	// it returns is kept in the journal and handed back by Resumed, so the
	// caller can restart its source after the last complete shard.
	Checkpoint func() Checkpoint
	// Allocator for the Arrow builders; default memory.DefaultAllocator.
	Allocator memory.Allocator
	// Pixels, when set, declares the rows pre-decoded: every row's Format
	// is Pixels.Encoding and its Bytes the pixels of its Width×Height. The
	// shards are then format version 3 and the manifest records Pixels.
	// Nil: rows hold encoded files (version 2).
	Pixels *Pixels
	// Layout, when set, makes the Writer one part of a distributed
	// conversion (see Plan.Layout and part.go): shards are numbered from
	// Layout.FirstShard, journal and manifest carry the part's name
	// (PartManifestName), other parts' files in the directory are left
	// alone, and Close checks the shards against the plan.
	Layout *PartLayout
}

// Checkpoint is the caller's position after a complete shard.
type Checkpoint struct {
	// Next is the source position of the first row of the next shard, in
	// whatever unit the caller counts (convert counts source images).
	Next int64 `json:"next"`
	// Skipped is the caller's skip count by reason up to Next.
	Skipped map[string]int64 `json:"skipped,omitempty"`
}

// Writer writes rows into part-NNNNN.parquet shards and, on Close, the
// manifest. Shard and row-group boundaries depend only on the rows and the
// options, so the same rows give byte-identical files, and a resumed run
// restarting at a shard boundary reproduces the uninterrupted run. A Writer
// is not safe for concurrent use.
type Writer struct {
	dir  *storage.Dir
	ctx  context.Context
	opts WriterOptions
	fp   string // fingerprint of the options, stored in the journal

	shards  []journalShard
	resumed *Checkpoint

	version int           // the format version written
	schema  *arrow.Schema // its row schema

	rb     *rowBuilder
	cur    *openShard
	rgEst  int64
	closed bool
}

type openShard struct {
	name      string
	f         *storage.Writer
	sink      *hashSink
	fw        parquetFileWriter
	rows      int64
	instances int64
	est       int64
}

type journal struct {
	FormatVersion int            `json:"format_version"`
	Options       string         `json:"options"`
	Shards        []journalShard `json:"shards"`
}

type journalShard struct {
	ShardInfo
	Checkpoint Checkpoint `json:"checkpoint"`
}

var partRE = regexp.MustCompile(`^part-[0-9]{5,}\.parquet$`)

// ShardName returns the file name of the i-th shard.
func ShardName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// Create prepares dir, a path (created if missing) or a URL (see
// formats/storage), for a conversion. Without Resume, dir must not already
// hold shards, a manifest or a journal. With Resume, finished shards listed
// in the journal are checked (size and sha256) and kept; the caller asks
// Resumed where to restart.
func Create(dir string, opts WriterOptions) (*Writer, error) {
	d, err := storage.Open(context.Background(), dir, nil)
	if err != nil {
		return nil, err
	}
	return CreateDir(d, opts)
}

// CreateDir is Create for a location already opened through
// formats/storage. Each shard, the journal and the manifest become visible
// only whole (in a bucket: uploaded, then read back and checked against
// their size and sha256), and the manifest last.
func CreateDir(dir *storage.Dir, opts WriterOptions) (*Writer, error) {
	ctx := context.Background()
	if opts.ShardBytes <= 0 {
		opts.ShardBytes = DefaultShardBytes
	}
	if opts.RowGroupBytes <= 0 {
		opts.RowGroupBytes = DefaultRowGroupBytes
	}
	if opts.Allocator == nil {
		opts.Allocator = memory.DefaultAllocator
	}
	if opts.Categories == nil {
		opts.Categories = []Category{}
	}
	for i, c := range opts.Categories {
		if c.Index != int32(i) {
			return nil, fmt.Errorf("category %d (%q) has index %d: want contiguous indices in order", c.ID, c.Name, c.Index)
		}
	}
	if err := dir.Mkdir(); err != nil {
		return nil, err
	}
	w := &Writer{dir: dir, ctx: ctx, opts: opts, version: versionEncoded, schema: schemaV2}
	if opts.Pixels != nil {
		if err := opts.Pixels.check(); err != nil {
			return nil, err
		}
		w.version, w.schema = FormatVersion, schema
	}
	w.fp = w.fingerprintOf(&Manifest{Source: opts.Source, Categories: opts.Categories,
		ShardBytes: opts.ShardBytes, RowGroupBytes: opts.RowGroupBytes, Pixels: opts.Pixels})

	names, err := dir.List(ctx)
	if err != nil {
		return nil, err
	}
	var parts, temps []string
	hasManifest, hasJournal := false, false
	for _, n := range names {
		switch {
		case n == w.manifestName():
			hasManifest = true
		case n == w.journalName():
			hasJournal = true
		case strings.HasPrefix(n, "."+w.manifestName()+".tmp-") || strings.HasPrefix(n, "."+w.journalName()+".tmp-"):
			temps = append(temps, n)
		case opts.Layout != nil && n == ManifestName:
			return nil, fmt.Errorf("%s already holds a merged conversion (%s): choose an empty directory", dir, ManifestName)
		case opts.Layout != nil && !opts.Layout.owns(n):
			// Another part's file: that part's writer looks after it.
		case partRE.MatchString(n):
			parts = append(parts, n)
		case strings.HasPrefix(n, ".part-"):
			temps = append(temps, n)
		}
	}
	if !opts.Resume {
		if hasManifest || hasJournal || len(parts) > 0 {
			return nil, fmt.Errorf("output directory %s already holds a conversion: pass --resume to continue it, or choose an empty directory", dir)
		}
	} else {
		if hasManifest {
			m, err := w.readOwnManifest()
			if err != nil {
				return nil, err
			}
			if w.fingerprintOf(m) != w.fp {
				return nil, fmt.Errorf("%s: finished conversion was made from another source or with other options; choose another directory", dir)
			}
			return nil, fmt.Errorf("%s: %w", dir, ErrComplete)
		}
		if hasJournal {
			if err := w.loadJournal(); err != nil {
				return nil, err
			}
		}
	}
	// Whatever is not in the journal is an unfinished leftover of the
	// interrupted run: it will be written again, identically.
	keep := map[string]bool{}
	for _, s := range w.shards {
		keep[s.File] = true
	}
	for _, n := range append(parts, temps...) {
		if !keep[n] {
			if err := dir.Remove(ctx, n); err != nil {
				return nil, err
			}
		}
	}
	// A row group closes after the row that reaches its target, so it
	// holds the target plus at most one more image; 1/8 slack covers
	// COCO-sized images without reserving for outliers.
	reserve := min(opts.RowGroupBytes, opts.ShardBytes)
	w.rb = newRowBuilder(opts.Allocator, int(reserve+reserve/8), w.schema)
	return w, nil
}

// fingerprintOf is what must not change between a run and its resume: the
// options a manifest records, and the part's layout.
func (w *Writer) fingerprintOf(m *Manifest) string {
	b, _ := json.Marshal(struct {
		Source        Source      `json:"source"`
		Categories    []Category  `json:"categories"`
		ShardBytes    int64       `json:"shard_bytes"`
		RowGroupBytes int64       `json:"row_group_bytes"`
		Pixels        *Pixels     `json:"pixels,omitempty"`
		Layout        *PartLayout `json:"layout,omitempty"`
	}{m.Source, m.Categories, m.ShardBytes, m.RowGroupBytes, m.Pixels, w.opts.Layout})
	return string(b)
}

func (w *Writer) loadJournal() error {
	path := w.dir.Join(w.journalName())
	b, err := w.dir.ReadFile(w.ctx, w.journalName())
	if err != nil {
		return err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if j.FormatVersion != w.version {
		return fmt.Errorf("%s: format_version %d, this segpipe writes %d: start again in an empty directory", path, j.FormatVersion, w.version)
	}
	if j.Options != w.fp {
		return fmt.Errorf("%s: the interrupted conversion used another source or other options (%s); resume with the same flags or start again in an empty directory", path, j.Options)
	}
	for i, s := range j.Shards {
		if want := ShardName(w.firstShard() + i); s.File != want {
			return fmt.Errorf("%s: shard %d is %q, want %q", path, i, s.File, want)
		}
		if err := w.dir.Check(w.ctx, s.File, s.Bytes, s.SHA256); err != nil {
			return fmt.Errorf("resume: finished shard %w; start again in an empty directory", err)
		}
	}
	w.shards = j.Shards
	if n := len(j.Shards); n > 0 {
		cp := j.Shards[n-1].Checkpoint
		w.resumed = &cp
	}
	return nil
}

// Resumed reports where the previous, interrupted run stopped: the
// checkpoint of its last complete shard. ok is false when there is nothing
// to resume and the caller starts from the beginning.
func (w *Writer) Resumed() (cp Checkpoint, ok bool) {
	if w.resumed == nil {
		return Checkpoint{}, false
	}
	return *w.resumed, true
}

// Shards returns the shards finished so far (including resumed ones).
func (w *Writer) Shards() []ShardInfo {
	out := make([]ShardInfo, len(w.shards))
	for i, s := range w.shards {
		out[i] = s.ShardInfo
	}
	return out
}

// Write appends one row. img is not retained: its slices may be reused by
// the caller as soon as Write returns.
func (w *Writer) Write(img *Image) error {
	if w.closed {
		return errors.New("shard writer: Write after Close")
	}
	if err := w.checkRow(img); err != nil {
		return err
	}
	if w.cur == nil {
		if err := w.openShard(); err != nil {
			return err
		}
	}
	w.rb.append(img)
	est := rowSize(img)
	w.rgEst += est
	w.cur.est += est
	w.cur.rows++
	w.cur.instances += int64(len(img.Instances))
	if w.cur.est >= w.opts.ShardBytes {
		return w.finishShard(true)
	}
	if w.rgEst >= w.opts.RowGroupBytes {
		return w.flushRowGroup()
	}
	return nil
}

// checkRow refuses a row the shard's version cannot describe: pixels in a
// shard of encoded files or the other way round, or pixels of the wrong
// size.
func (w *Writer) checkRow(img *Image) error {
	p := w.opts.Pixels
	switch {
	case p == nil && Predecoded(img.Format):
		return fmt.Errorf("image %d: %s pixels need WriterOptions.Pixels", img.ImageID, img.Format)
	case p != nil && img.Format != p.Encoding:
		return fmt.Errorf("image %d: format %q in a conversion of %s pixels", img.ImageID, img.Format, p.Encoding)
	case p != nil && p.Encoding == FormatRaw && int64(len(img.Bytes)) != PixelBytes(img.Width, img.Height):
		return fmt.Errorf("image %d: %d raw bytes for %dx%d pixels", img.ImageID, len(img.Bytes), img.Width, img.Height)
	case p != nil && p.MaxSide > 0 && max(img.Width, img.Height) > int32(min(p.MaxSide, 1<<31-1)):
		return fmt.Errorf("image %d: %dx%d exceeds the max side %d", img.ImageID, img.Width, img.Height, p.MaxSide)
	}
	return nil
}

func (w *Writer) openShard() error {
	name := ShardName(w.firstShard() + len(w.shards))
	f, err := w.dir.Create(w.ctx, name)
	if err != nil {
		return err
	}
	sink := newHashSink(f)
	props, aprops := writerProps()
	fw, err := newParquetFileWriter(w.schema, sink, props, aprops)
	if err != nil {
		sink.finish()
		f.Abort()
		return fmt.Errorf("shard %s: %w", name, err)
	}
	w.cur = &openShard{name: name, f: f, sink: sink, fw: fw}
	w.rgEst = 0
	return nil
}

func (w *Writer) flushRowGroup() error {
	w.rgEst = 0
	if w.rb.rows == 0 {
		return nil
	}
	rec := w.rb.flush()
	defer rec.Release()
	if err := w.cur.fw.Write(rec); err != nil {
		return fmt.Errorf("shard %s: write row group: %w", w.cur.name, err)
	}
	return nil
}

// finishShard completes the open shard: footer, then the commit (locally
// fsync, rename, directory fsync; in a bucket the finished upload, read
// back and checked), then the journal, in that order, so a listed shard is
// always complete in storage.
func (w *Writer) finishShard(journalIt bool) error {
	s := w.cur
	if err := w.flushRowGroup(); err != nil {
		return err
	}
	if err := s.fw.AppendKeyValueMetadata(MetadataKeyFormatVersion, strconv.Itoa(w.version)); err != nil {
		return fmt.Errorf("shard %s: %w", s.name, err)
	}
	if err := s.fw.Close(); err != nil {
		return fmt.Errorf("shard %s: %w", s.name, err)
	}
	err := s.sink.finish()
	if err == nil {
		err = s.f.Commit()
	}
	if err != nil {
		s.f.Abort()
		return fmt.Errorf("shard %s: %w", s.name, err)
	}
	w.cur = nil
	js := journalShard{ShardInfo: ShardInfo{
		File: s.name, Rows: s.rows, Instances: s.instances,
		Bytes: s.sink.n, SHA256: hex.EncodeToString(s.sink.sum()),
	}}
	if journalIt && w.opts.Checkpoint != nil {
		js.Checkpoint = w.opts.Checkpoint()
	}
	w.shards = append(w.shards, js)
	if !journalIt {
		return nil
	}
	b, err := json.MarshalIndent(journal{FormatVersion: w.version, Options: w.fp, Shards: w.shards}, "", "  ")
	if err != nil {
		return err
	}
	return w.dir.WriteFile(w.ctx, w.journalName(), b)
}

// Close finishes the last shard and writes manifest.json with skipped as
// the skip counts, then removes the journal. It returns the manifest.
func (w *Writer) Close(skipped map[string]int64) (*Manifest, error) {
	if w.closed {
		return nil, errors.New("shard writer: Close called twice")
	}
	w.closed = true
	defer w.rb.release()
	if w.cur != nil {
		if err := w.finishShard(false); err != nil {
			return nil, err
		}
	}
	if skipped == nil {
		skipped = map[string]int64{}
	}
	m := &Manifest{
		FormatVersion: w.version,
		Source:        w.opts.Source,
		Categories:    w.opts.Categories,
		ShardBytes:    w.opts.ShardBytes,
		RowGroupBytes: w.opts.RowGroupBytes,
		Pixels:        w.opts.Pixels,
		Shards:        w.Shards(),
		Skipped:       skipped,
	}
	for _, s := range m.Shards {
		m.Rows += s.Rows
		m.Instances += s.Instances
		m.Bytes += s.Bytes
	}
	b, err := w.encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if err := w.dir.WriteFile(w.ctx, w.manifestName(), b); err != nil {
		return nil, err
	}
	// No directory sync after this removal: a journal that survives a
	// crash next to a manifest is ignored, the manifest wins.
	if err := w.dir.Remove(w.ctx, w.journalName()); err != nil {
		return nil, err
	}
	return m, nil
}

// Abort stops without a manifest: the open shard is discarded, finished
// shards and the journal stay so that a run with Resume continues.
func (w *Writer) Abort() error {
	if w.closed {
		return nil
	}
	w.closed = true
	w.rb.release()
	if w.cur != nil {
		w.cur.sink.finish()
		w.cur.f.Abort()
		w.cur = nil
	}
	return nil
}
