//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/storage"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// options are the loader resources a server would decide (segpipe.h).
type options struct {
	Workers    int            `json:"workers"`
	Prefetch   int            `json:"prefetch"`
	CacheBytes int64          `json:"cache_bytes"`
	MaxMemory  int64          `json:"max_memory"`
	Strict     bool           `json:"strict"`
	Remote     *remoteOptions `json:"remote"` // stream from a server instead (remote.go)
}

// parseOptions decodes options_json; empty means the defaults. Unknown
// keys and trailing data are refused.
func parseOptions(b []byte) (options, error) {
	var o options
	if len(bytes.TrimSpace(b)) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("segpipe: options: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return o, errors.New("segpipe: options: trailing data after the options object")
	}
	// -1 is the one way to ask for no budget: another negative number is
	// more likely a mistake (a subtraction gone wrong) than a wish to run
	// unbounded.
	if o.MaxMemory < NoMemoryLimit {
		return o, fmt.Errorf("segpipe: options: max_memory %d: want bytes > 0, 0 for the default budget or %d for none", o.MaxMemory, NoMemoryLimit)
	}
	if o.Remote != nil {
		if o.Workers != 0 || o.Prefetch != 0 || o.CacheBytes != 0 || o.MaxMemory != 0 || o.Strict {
			return o, errors.New("segpipe: options: workers, prefetch, cache_bytes, max_memory and strict are a local loader's; with remote the server decides them")
		}
		if err := o.Remote.check(); err != nil {
			return o, err
		}
	}
	return o, nil
}

// NoMemoryLimit is the max_memory option that lifts the budget.
const NoMemoryLimit = -1

// errClosed ends a stream whose handle was closed.
var errClosed = errors.New("segpipe: the loader was closed (segpipe_close or the stream's release)")

// session is one open loader and its stream.
type session struct {
	plan   *remote.Plan
	pool   *sharedPool  // every buffer of its records, over the caller's allocator, shared with the passes before and after (pools.go)
	cache  *sharedCache // the shard set's decoded images, shared likewise
	src    *pipeline.ShardSource
	loader *pipeline.Loader
	remote *remoteSource // set instead of the four above for options "remote"
	cancel context.CancelFunc
	ctx    context.Context

	// nextMu serialises a stream read with stopping the loader (a Loader
	// takes Next from one goroutine at a time, and not during Close).
	nextMu  sync.Mutex
	stopped bool

	mu      sync.Mutex // guards state, batches and err
	state   order.State
	batches int64
	err     error
}

// open starts a session: the request and options are checked exactly as
// segpipe.h says, the shard set is opened and the loader started with its
// buffers from mem.
func open(request, opts []byte, mem memory.Allocator) (*session, error) {
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.Remote != nil {
		return openRemote(request, o.Remote, mem)
	}
	req, err := remote.ParseLocalRequest(request)
	if err != nil {
		return nil, err
	}
	// The request's settings are checked as serve checks them; the memory
	// budget is the caller's (max_memory), refused with the loader's own
	// figures rather than a server's words.
	spareP()
	if o.Workers == 0 {
		o.Workers = cores // not GOMAXPROCS: one P is kept for the host's calls (procs.go)
	}
	base := pipeline.Config{Workers: o.Workers, Prefetch: o.Prefetch, CacheBytes: o.CacheBytes, Strict: o.Strict,
		MaxMemory: -1, Allocator: mem}
	plan, err := remote.NewPlan(req, base)
	if err != nil {
		return nil, err
	}
	plan.Config.MaxMemory = o.MaxMemory
	if err := plan.Config.Validate(); err != nil {
		return nil, err
	}
	src, err := openShards(req.Shards)
	if err != nil {
		return nil, err
	}
	cache := caches.acquire(cacheKeyOf(req.Shards, src, o.CacheBytes))
	plan.Config.ImageCache = cache.value
	est, err := plan.Config.MemoryOf(src)
	if err != nil {
		src.Close()
		caches.release(cache)
		return nil, err
	}
	pool := pools.acquire(poolKey{mem, est.Batches})
	plan.Config.Allocator = pool.value
	ctx, cancel := context.WithCancel(context.Background())
	l, err := plan.Open(ctx, src)
	if err != nil {
		cancel()
		src.Close()
		pools.release(pool)
		caches.release(cache)
		return nil, err
	}
	return &session{plan: plan, pool: pool, cache: cache, src: src, loader: l.(*pipeline.Loader), ctx: ctx, cancel: cancel,
		state: req.Start}, nil
}

// cacheKey names a shard set as opened: where it is (a local directory
// absolute, cleaned and with its symbolic links resolved, so that "dir",
// "dir/", "./dir", a link to it and its absolute path share one cache), its
// manifest's size and row count (a set converted again in place is
// another set: cached rows are keyed by their index), and the cache bound
// asked for.
type cacheKey struct {
	location   string
	bytes      int64
	rows       int64
	cacheBytes int64
}

func cacheKeyOf(location string, src *pipeline.ShardSource, cacheBytes int64) cacheKey {
	if cacheBytes == 0 {
		cacheBytes = pipeline.DefaultCacheBytes
	}
	var rows int64
	for _, n := range src.BlockRows() {
		rows += int64(n)
	}
	return cacheKey{canonicalLocation(location), src.EncodedBytes(), rows, cacheBytes}
}

// canonicalLocation is one name for the set at location: a bucket URL as
// given, less trailing slashes; a local directory as its real path (the
// cleaned absolute path when it cannot be resolved, which only costs a
// cache shared less).
func canonicalLocation(location string) string {
	loc, err := storage.ParseLocation(location)
	if err != nil || loc.IsBucket() {
		return strings.TrimRight(location, "/")
	}
	dir, err := filepath.Abs(loc.Dir)
	if err != nil {
		return filepath.Clean(loc.Dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return dir
}

// openShards opens a shard directory or bucket URL, saying which when a
// local directory is missing.
func openShards(location string) (*pipeline.ShardSource, error) {
	loc, err := storage.ParseLocation(location)
	if err != nil {
		return nil, fmt.Errorf("segpipe: shards %q: %w", location, err)
	}
	if !loc.IsBucket() {
		st, err := os.Stat(loc.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("segpipe: shards %q does not exist", location)
		case err != nil:
			return nil, fmt.Errorf("segpipe: shards %q: %w", location, err)
		case !st.IsDir():
			return nil, fmt.Errorf("segpipe: shards %q is not a directory", location)
		}
	}
	src, err := pipeline.OpenShards(location)
	if err != nil {
		return nil, fmt.Errorf("segpipe: shards %q: %w", location, err)
	}
	return src, nil
}

// next returns the stream's next record (the caller owns it) and records
// the state after it; io.EOF after the last, at the request's limit too.
func (s *session) next() (arrow.RecordBatch, error) {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if s.stopped {
		return nil, errClosed
	}
	s.mu.Lock()
	n := s.batches
	s.mu.Unlock()
	if lim := s.plan.Request.Limit; lim > 0 && n >= lim {
		return nil, io.EOF
	}
	var out arrow.RecordBatch
	var st order.State
	var err error
	if s.remote != nil {
		// Records come as they travelled, windowed masks too.
		out, st, err = s.remote.take(s.ctx)
	} else {
		out, err = s.loader.Next(s.ctx)
		st = s.loader.State()
	}
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return nil, errClosed
		}
		return nil, s.fail(fmt.Errorf("segpipe: batch %d: %w", n, err))
	}
	if s.remote == nil {
		if out, err = s.plan.Encode(out, s.pool.value); err != nil {
			return nil, s.fail(fmt.Errorf("segpipe: batch %d: %w", n, err))
		}
	}
	s.mu.Lock()
	s.state, s.batches = st, n+1
	s.mu.Unlock()
	return out, nil
}

// fail keeps the first loader error for the summary and returns err.
func (s *session) fail(err error) error {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	return err
}

// stop stops the loader and closes the shards; idempotent. A read in
// progress returns errClosed first.
func (s *session) stop() {
	s.cancel()
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.remote != nil {
		s.remote.close()
		return
	}
	s.loader.Close()
	s.src.Close()
	pools.release(s.pool)
	caches.release(s.cache)
}

// stateJSON is segpipe_state's text.
func (s *session) stateJSON() []byte {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	b, _ := json.Marshal(struct {
		Seed     uint64 `json:"seed"`
		Epoch    int    `json:"epoch"`
		Consumed int64  `json:"consumed"`
	}{st.Seed, st.Epoch, st.Consumed})
	return b
}

// summaryJSON is segpipe_summary's text: the loader's skip summary with
// the batches handed out.
func (s *session) summaryJSON() ([]byte, error) {
	if s.remote != nil {
		// The server keeps the skip counts (its metrics and summary).
		s.mu.Lock()
		defer s.mu.Unlock()
		return json.Marshal(map[string]int64{"batches": s.batches})
	}
	sum, err := json.Marshal(s.loader.Stats().Summary())
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(sum, &m); err != nil {
		return nil, err
	}
	s.mu.Lock()
	m["batches"], _ = json.Marshal(s.batches)
	s.mu.Unlock()
	return json.Marshal(m)
}

// reader is the session's stream as an array.RecordReader, which
// cdata.ExportRecordReader exports: the stream's callbacks call it. It
// recovers panics into Err, so that no callback unwinds into C.
type reader struct {
	s    *session
	refs atomic.Int64
	cur  arrow.RecordBatch
	err  error
}

func newReader(s *session) *reader {
	r := &reader{s: s}
	r.refs.Store(1)
	return r
}

// Retain implements array.RecordReader.
func (r *reader) Retain() { r.refs.Add(1) }

// Release implements array.RecordReader: the last release (the stream's
// release callback) drops the current record and stops the loader.
func (r *reader) Release() {
	if r.refs.Add(-1) != 0 {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			r.err = panicError(p)
		}
	}()
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	r.s.stop()
}

// Schema implements array.RecordReader.
func (r *reader) Schema() *arrow.Schema { return r.s.plan.Schema }

// Next implements array.RecordReader.
func (r *reader) Next() (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			r.err, ok = panicError(p), false
		}
	}()
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	if r.err != nil {
		return false
	}
	rec, err := r.s.next()
	if err == io.EOF {
		return false
	}
	if err != nil {
		r.err = err
		return false
	}
	r.cur = storageRecord(rec)
	rec.Release()
	return true
}

// RecordBatch implements array.RecordReader: the current batch with its
// extension columns as their storage (storageRecord), for the C export.
func (r *reader) RecordBatch() arrow.RecordBatch { return r.cur }

// Record implements array.RecordReader.
//
// Deprecated: use RecordBatch (kept for the interface).
func (r *reader) Record() arrow.RecordBatch { return r.cur }

// Err implements array.RecordReader: the error that ended the stream, the
// stream's get_last_error.
func (r *reader) Err() error { return r.err }

var _ array.RecordReader = (*reader)(nil)

// panicError turns a recovered panic into an error with its stack.
func panicError(p any) error {
	return fmt.Errorf("segpipe: internal error (please report): %v\n%s", p, debug.Stack())
}

// sessions holds the open handles.
var sessions = struct {
	sync.Mutex
	m    map[int64]*session
	next int64
}{m: map[int64]*session{}}

// openHandle opens a session, exports its stream into out (zeroed or
// released) and returns its handle.
func openHandle(request, opts []byte, out *cdata.CArrowArrayStream, mem memory.Allocator) (h int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			h, err = 0, panicError(p)
		}
	}()
	if out == nil {
		return 0, errors.New("segpipe: no ArrowArrayStream to export into (out is NULL)")
	}
	s, err := open(request, opts, mem)
	if err != nil {
		return 0, err
	}
	rdr := newReader(s)
	cdata.ExportRecordReader(rdr, out) // takes its own reference
	rdr.Release()
	if err := guardStream(out); err != nil {
		return 0, err // the release stopped the session
	}
	sessions.Lock()
	defer sessions.Unlock()
	sessions.next++
	sessions.m[sessions.next] = s
	return sessions.next, nil
}

// lookup returns the session of handle h, nil when it is not open.
func lookup(h int64) *session {
	sessions.Lock()
	defer sessions.Unlock()
	return sessions.m[h]
}

// closeHandle stops h's loader and forgets h; unknown handles are ignored.
func closeHandle(h int64) {
	sessions.Lock()
	s := sessions.m[h]
	delete(sessions.m, h)
	sessions.Unlock()
	if s != nil {
		s.stop()
	}
}

// fill copies msg into buf as a NUL-terminated string cut to fit and
// returns len(msg).
func fill(buf []byte, msg []byte) int {
	if len(buf) == 0 {
		return len(msg)
	}
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
	return len(msg)
}

// storageRecord returns rec with every extension array, at any depth,
// replaced by its storage (same buffers, no copy); the caller still owns
// rec. arrow-go's C data export (v18.8) exports an extension array
// without the children of its storage, so a fixed_shape_tensor column
// would reach C without its values; the stream's schema (get_schema) keeps
// the extension types, which the consumer puts back on import.
func storageRecord(rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, rec.NumCols())
	fields := make([]arrow.Field, rec.NumCols())
	for i, c := range rec.Columns() {
		d := storageData(c.Data())
		cols[i] = array.MakeFromData(d)
		d.Release()
		fields[i] = rec.Schema().Field(i)
		fields[i].Type = d.DataType()
	}
	md := rec.Schema().Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
}

// storageData is d with extension types replaced by their storage types,
// over the same buffers; the caller owns the result.
func storageData(d arrow.ArrayData) arrow.ArrayData {
	children := make([]arrow.ArrayData, len(d.Children()))
	for i, c := range d.Children() {
		children[i] = storageData(c)
	}
	out := array.NewData(storageType(d.DataType()), d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}

// storageType is dt with extension types replaced by their storage.
func storageType(dt arrow.DataType) arrow.DataType {
	switch t := dt.(type) {
	case arrow.ExtensionType:
		return storageType(t.StorageType())
	case *arrow.ListType:
		f := t.ElemField()
		f.Type = storageType(f.Type)
		return arrow.ListOfField(f)
	case *arrow.FixedSizeListType:
		f := t.ElemField()
		f.Type = storageType(f.Type)
		return arrow.FixedSizeListOfField(t.Len(), f)
	case *arrow.StructType:
		fields := t.Fields()
		for i := range fields {
			fields[i].Type = storageType(fields[i].Type)
		}
		return arrow.StructOf(fields...)
	}
	return dt
}
