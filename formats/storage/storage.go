package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// Options configures a Dir. The zero value reads buckets with read-ahead
// and retries and without a local cache.
type Options struct {
	// CacheDir, when set, keeps ranges read from buckets in this local
	// directory (created if missing), shared by processes and restarts.
	CacheDir string
	// CacheBytes is the cache's budget; default DefaultCacheBytes.
	CacheBytes int64
	// ReadAheadBytes bounds the bytes fetched ahead of the reader and held
	// in memory per Dir; default DefaultReadAheadBytes, negative disables.
	ReadAheadBytes int64
	// Retries is the number of retries of a transient error; default
	// DefaultRetries, negative means none.
	Retries int
	// RetryDelay is the first backoff, doubled each retry up to
	// MaxRetryDelay; default 100 ms.
	RetryDelay time.Duration
}

// Defaults of Options.
const (
	DefaultCacheBytes     = 10 << 30
	DefaultReadAheadBytes = 64 << 20 // four default row groups
	DefaultRetries        = 6
	MaxRetryDelay         = 2 * time.Second
)

var defaults atomic.Pointer[Options]

// SetDefaultOptions sets the options Open uses when given nil (the
// command line sets them from --cache-dir and --cache-size).
func SetDefaultOptions(o Options) { defaults.Store(&o) }

// DefaultOptions returns the options set by SetDefaultOptions, or the zero
// Options.
func DefaultOptions() Options {
	if o := defaults.Load(); o != nil {
		return *o
	}
	return Options{}
}

func (o Options) withDefaults() Options {
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.ReadAheadBytes == 0 {
		o.ReadAheadBytes = DefaultReadAheadBytes
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 100 * time.Millisecond
	}
	return o
}

// ErrNotExist is matched (errors.Is) by errors about a missing file or
// object; it is fs.ErrNotExist.
var ErrNotExist = fs.ErrNotExist

// Dir is a shard location opened for reading and writing: a local
// directory or a bucket prefix. It is safe for concurrent use.
type Dir struct {
	loc  Location
	opts Options

	b      *blob.Bucket // nil for a local directory
	cache  *diskCache   // nil without Options.CacheDir or for local
	ahead  *aheadPool   // nil for local or with read-ahead disabled
	ctx    context.Context
	cancel context.CancelFunc

	idents    sync.Map // object name → identity (location, size, ETag) for the cache
	scheduled atomic.Bool
}

// Open opens a location (see ParseLocation) with opts, or with
// DefaultOptions when opts is nil. A local directory need not exist yet
// (see Mkdir); opening a bucket checks nothing remote either: the first
// request reports a wrong name or missing credentials. A bucket whose
// driver this build leaves out (-tags nocloud) is refused with an error
// wrapping ErrNoDriver.
func Open(ctx context.Context, location string, opts *Options) (*Dir, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return nil, err
	}
	o := DefaultOptions()
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	if !loc.IsBucket() {
		return &Dir{loc: loc, opts: o}, nil
	}
	if err := checkDriver(loc.Scheme); err != nil {
		return nil, fmt.Errorf("shard location %s: %w", loc, err)
	}
	b, err := blob.OpenBucket(ctx, loc.bucketURL())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", loc, err)
	}
	return newBucketDir(loc, b, o)
}

// newBucketDir wraps an opened bucket (its prefix not yet applied).
func newBucketDir(loc Location, b *blob.Bucket, o Options) (*Dir, error) {
	if loc.Prefix != "" {
		b = blob.PrefixedBucket(b, loc.Prefix)
	}
	d := &Dir{loc: loc, opts: o, b: b}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if o.CacheDir != "" {
		c, err := openDiskCache(o.CacheDir, o.CacheBytes)
		if err != nil {
			b.Close()
			return nil, err
		}
		d.cache = c
	}
	if o.ReadAheadBytes > 0 {
		d.ahead = newAheadPool(o.ReadAheadBytes)
	}
	return d, nil
}

// Close stops read-ahead and releases the bucket's client. A Dir whose
// owner exits needs no Close.
func (d *Dir) Close() error {
	if d.b == nil {
		return nil
	}
	d.cancel()
	return d.b.Close()
}

// Location returns the parsed location.
func (d *Dir) Location() Location { return d.loc }

// String returns the location as given (normalised).
func (d *Dir) String() string { return d.loc.String() }

// Join names a file of the Dir for messages: a path or a URL.
func (d *Dir) Join(name string) string { return d.loc.Join(name) }

// LocalPath returns the local directory and true, or "" and false for a
// bucket.
func (d *Dir) LocalPath() (string, bool) { return d.loc.Dir, !d.loc.IsBucket() }

// checkName refuses names that would escape the Dir: files are flat.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("file name %q: want a plain name", name)
	}
	return nil
}

func (d *Dir) path(name string) string { return filepath.Join(d.loc.Dir, name) }

// Mkdir creates a local directory (and its parents); a no-op for a bucket,
// whose prefixes exist as soon as an object does.
func (d *Dir) Mkdir() error {
	if d.b != nil {
		return nil
	}
	return os.MkdirAll(d.loc.Dir, 0o755)
}

// List returns the names of the files directly in the Dir (not of
// sub-directories), sorted. A missing local directory lists as empty.
func (d *Dir) List(ctx context.Context) ([]string, error) {
	if d.b == nil {
		entries, err := os.ReadDir(d.loc.Dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		return names, nil
	}
	var names []string
	err := d.retry(ctx, func(ctx context.Context) error {
		names = names[:0]
		it := d.b.List(&blob.ListOptions{Delimiter: "/"})
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if !o.IsDir {
				names = append(names, o.Key)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.loc, d.wrap(err))
	}
	return names, nil
}

// Stat returns the size of a file; a missing one gives an error matching
// ErrNotExist.
func (d *Dir) Stat(ctx context.Context, name string) (int64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if d.b == nil {
		st, err := os.Stat(d.path(name))
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	a, err := d.attributes(ctx, name)
	if err != nil {
		return 0, err
	}
	return a.Size, nil
}

func (d *Dir) attributes(ctx context.Context, name string) (*blob.Attributes, error) {
	var a *blob.Attributes
	err := d.retry(ctx, func(ctx context.Context) (err error) {
		a, err = d.b.Attributes(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Join(name), d.wrap(err))
	}
	return a, nil
}

// ReadFile returns a whole (small) file: a manifest, a journal.
func (d *Dir) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if d.b == nil {
		return os.ReadFile(d.path(name))
	}
	var b []byte
	err := d.retry(ctx, func(ctx context.Context) (err error) {
		b, err = d.b.ReadAll(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Join(name), d.wrap(err))
	}
	return b, nil
}

// WriteFile makes name hold b, visible only whole (see Create).
func (d *Dir) WriteFile(ctx context.Context, name string, b []byte) error {
	w, err := d.Create(ctx, name)
	if err != nil {
		return err
	}
	defer w.Abort()
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Commit()
}

// Remove deletes a file; removing a missing one is not an error.
func (d *Dir) Remove(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if d.b == nil {
		if err := os.Remove(d.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	err := d.retry(ctx, func(ctx context.Context) error {
		err := d.b.Delete(ctx, name)
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", d.Join(name), d.wrap(err))
	}
	return nil
}

// wrap makes a bucket's not-found error match ErrNotExist.
func (d *Dir) wrap(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%w)", fs.ErrNotExist, err)
	}
	return err
}

// Writer is a pending file. Nothing is visible under its name until Commit
// returns nil; Abort (safe after Commit, so fit for a defer) discards it.
type Writer struct {
	d    *Dir
	name string

	af *atomicfile.File // local

	bw     *blob.Writer // bucket
	cancel context.CancelFunc
	h      hash.Hash
	n      int64
	err    error
	done   bool
}

// Create starts writing name. Local files get permissions 0644: shards
// are meant to be shared.
func (d *Dir) Create(ctx context.Context, name string) (*Writer, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if d.b == nil {
		f, err := atomicfile.Create(d.path(name), 0o644)
		if err != nil {
			return nil, err
		}
		return &Writer{d: d, name: name, af: f}, nil
	}
	// Cancelling the writer's context before Close is how gocloud aborts
	// an upload: no object appears.
	wctx, cancel := context.WithCancel(ctx)
	bw, err := d.b.NewWriter(wctx, name, &blob.WriterOptions{
		ContentType:                 contentType(name),
		DisableContentTypeDetection: true,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("create %s: %w", d.Join(name), err)
	}
	return &Writer{d: d, name: name, bw: bw, cancel: cancel, h: sha256.New()}, nil
}

func contentType(name string) string {
	switch filepath.Ext(name) {
	case ".json":
		return "application/json"
	case ".parquet":
		return "application/vnd.apache.parquet"
	}
	return "application/octet-stream"
}

// Write appends p.
func (w *Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("write %s: after commit or abort", w.d.Join(w.name))
	}
	if w.af != nil {
		return w.af.Write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.bw.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	if err != nil {
		w.err = fmt.Errorf("upload %s: %w", w.d.Join(w.name), err)
	}
	return n, w.err
}

// Commit makes the file visible. In a bucket it completes the upload, then
// reads the object back and checks its size and sha256 against the bytes
// written; a mismatch deletes the object and is an error.
func (w *Writer) Commit() error {
	if w.done {
		return fmt.Errorf("commit %s: after commit or abort", w.d.Join(w.name))
	}
	w.done = true
	if w.af != nil {
		return w.af.Commit()
	}
	defer w.cancel()
	if w.err != nil {
		w.cancel()
		w.bw.Close()
		return w.err
	}
	if err := w.bw.Close(); err != nil {
		return fmt.Errorf("upload %s: %w", w.d.Join(w.name), err)
	}
	sum := hex.EncodeToString(w.h.Sum(nil))
	if err := w.d.Check(w.d.ctx, w.name, w.n, sum); err != nil {
		// Leave no object that differs from what was written.
		w.d.Remove(context.Background(), w.name)
		return fmt.Errorf("upload verification: %w", err)
	}
	return nil
}

// Abort discards the pending file; a no-op after Commit or Abort.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.af != nil {
		w.af.Abort()
		return
	}
	w.cancel()
	w.bw.Close()
}

// Check compares a file's size and sha256 with the expected values,
// reading it whole (from the store, never from the cache).
func (d *Dir) Check(ctx context.Context, name string, size int64, sum string) error {
	f, err := d.openFile(ctx, name, false)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Size() != size {
		return fmt.Errorf("%s: %d bytes, manifest says %d", d.Join(name), f.Size(), size)
	}
	h := sha256.New()
	buf := make([]byte, max(min(size, 8<<20), 512))
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, size), buf); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("%s: sha256 %s, manifest says %s", d.Join(name), got, sum)
	}
	return nil
}

// OpenParent opens the Dir holding the file at location (a path or URL)
// and returns the file's name in it.
func OpenParent(ctx context.Context, location string, opts *Options) (*Dir, string, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return nil, "", err
	}
	var name string
	if loc.IsBucket() {
		p := strings.TrimSuffix(loc.Prefix, "/")
		if p == "" {
			return nil, "", fmt.Errorf("%s: names a bucket, not a file", loc)
		}
		i := strings.LastIndexByte(p, '/')
		name, loc.Prefix = p[i+1:], p[:i+1]
	} else {
		name, loc.Dir = filepath.Base(loc.Dir), filepath.Dir(loc.Dir)
	}
	d, err := Open(ctx, loc.String(), opts)
	if err != nil {
		return nil, "", err
	}
	return d, name, nil
}
