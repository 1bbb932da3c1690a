package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// tailBytes is read at open: a Parquet footer of a segpipe shard (a few
// KiB per row group) fits, so opening a shard costs one ranged request.
const tailBytes = 64 << 10

// Range is a byte range of a file.
type Range struct{ Off, Len int64 }

// End is the offset just past the range.
func (r Range) End() int64 { return r.Off + r.Len }

// File is one file opened for random reads: an io.ReaderAt and io.Seeker
// (what a Parquet reader takes). It is safe for concurrent use.
type File struct {
	d     *Dir
	name  string
	size  int64
	ident string // object identity for the cache: location, size, ETag
	local *os.File

	mu     sync.Mutex
	pos    int64
	tail   []byte // the last bytes of the file
	blocks []Range
	cur    int // index in blocks of held, or -1
	held   []byte
	ahead  bool // read-ahead of following blocks enabled
	closed bool
	bound  context.Context // see Bind; nil: the Dir's
}

// OpenFile opens name for reading. In a bucket it costs one metadata and
// one ranged request (the tail, where a Parquet footer lives).
func (d *Dir) OpenFile(ctx context.Context, name string) (*File, error) {
	return d.openFile(ctx, name, true)
}

func (d *Dir) openFile(ctx context.Context, name string, cached bool) (*File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if d.b == nil {
		f, err := os.Open(d.path(name))
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		return &File{d: d, name: name, size: st.Size(), local: f, cur: -1}, nil
	}
	a, err := d.attributes(ctx, name)
	if err != nil {
		return nil, err
	}
	f := &File{d: d, name: name, size: a.Size, cur: -1, ahead: cached}
	if cached {
		f.ident = fmt.Sprintf("%s\x00%d\x00%s\x00%d", d.Join(name), a.Size, a.ETag, a.ModTime.UnixNano())
		d.idents.Store(name, f.ident)
		t := Range{Off: max(0, a.Size-tailBytes), Len: min(a.Size, tailBytes)}
		if t.Len > 0 {
			if f.tail, err = d.fetch(ctx, name, f.ident, t); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// Name is the file's name in its Dir.
func (f *File) Name() string { return f.name }

// Size is the file's size when it was opened.
func (f *File) Size() int64 { return f.size }

// SetBlocks names the ranges that are read whole (a Parquet file's row
// groups): a read inside one fetches all of it, and the ranges after it
// are fetched ahead. Ranges must be sorted and disjoint, else they are
// ignored. A no-op for a local file.
func (f *File) SetBlocks(blocks []Range) {
	if f.local != nil {
		return
	}
	for i, b := range blocks {
		if b.Off < 0 || b.Len <= 0 || b.End() > f.size || i > 0 && b.Off < blocks[i-1].End() {
			return
		}
	}
	f.mu.Lock()
	f.blocks = append([]Range(nil), blocks...)
	f.cur, f.held = -1, nil
	f.mu.Unlock()
}

// Prefetch starts fetching a range of a file of d in the background, if
// the read-ahead budget allows, so that a later read of exactly that
// range (a block set with SetBlocks) finds it in memory. The file must
// have been opened by this Dir before (its identity is known then);
// otherwise, and for local directories, Prefetch does nothing. Once a
// caller schedules its reads with Prefetch, the Dir's files stop guessing
// with sequential read-ahead, which would spend the budget on blocks a
// shuffled reader does not read next.
//
// It returns false when the budget is spent: a caller with a schedule
// stops there and asks again after its next read.
func (d *Dir) Prefetch(name string, r Range) bool {
	d.scheduled.Store(true)
	return d.prefetch(name, r)
}

func (d *Dir) prefetch(name string, r Range) bool {
	if d.ahead == nil {
		return false
	}
	id, ok := d.idents.Load(name)
	if !ok {
		return true // not a file of this Dir yet: nothing to fetch
	}
	ident := id.(string)
	return d.ahead.start(aheadKey{ident, r}, r.Len, func() ([]byte, error) {
		return d.fetch(d.ctx, name, ident, r)
	})
}

// Bind makes the file's reads, until unbind is called, end when ctx is
// done as well as when the Dir is closed. io.ReaderAt, which a Parquet
// reader calls, carries no context, so without Bind a read of a stalled
// bucket could be ended only by closing the Dir; a reader that waits on a
// caller's context binds it for the span of one read (ShardReader does,
// per row group). The binding holds for every read of the file, so a file
// read by several goroutines at once should not be bound. A no-op for a
// local file.
func (f *File) Bind(ctx context.Context) (unbind func()) {
	if f.local != nil {
		return func() {}
	}
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(f.d.ctx, cancel)
	f.mu.Lock()
	prev := f.bound
	f.bound = c
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.bound = prev
		f.mu.Unlock()
		stop()
		cancel()
	}
}

// ReadAt implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if f.local != nil {
		return f.local.ReadAt(p, off)
	}
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d", f.d.Join(f.name), off)
	}
	if off >= f.size {
		return 0, io.EOF
	}
	want := Range{off, min(int64(len(p)), f.size-off)}
	n, err := f.readAt(p[:want.Len], want)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func (f *File) readAt(p []byte, want Range) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, fmt.Errorf("read %s: file closed", f.d.Join(f.name))
	}
	// ReadAt has no context: reads live as long as the Dir, or as the
	// caller that bound one.
	ctx := f.d.ctx
	if f.bound != nil {
		ctx = f.bound
	}
	tailOff := f.size - int64(len(f.tail))
	if len(f.tail) > 0 && want.Off >= tailOff {
		return copy(p, f.tail[want.Off-tailOff:]), nil
	}
	g := sort.Search(len(f.blocks), func(i int) bool { return f.blocks[i].End() > want.Off })
	if g < len(f.blocks) && f.blocks[g].Off <= want.Off && want.End() <= f.blocks[g].End() {
		if f.cur != g {
			b, err := f.block(ctx, g)
			if err != nil {
				return 0, err
			}
			f.cur, f.held = g, b
			if f.ahead && !f.d.scheduled.Load() {
				// Sequential read-ahead: the following blocks, as far
				// as the budget goes.
				for k := g + 1; k < len(f.blocks) && f.d.prefetch(f.name, f.blocks[k]); k++ {
				}
			}
		}
		blk := f.blocks[g]
		return copy(p, f.held[want.Off-blk.Off:]), nil
	}
	b, err := f.d.fetchDirect(ctx, f.name, want)
	return copy(p, b), err
}

// block returns block g: fetched ahead, cached, or fetched now.
func (f *File) block(ctx context.Context, g int) ([]byte, error) {
	r := f.blocks[g]
	if f.d.ahead != nil && f.ident != "" {
		if b, ok := f.d.ahead.take(ctx, aheadKey{f.ident, r}); ok {
			return b, nil
		}
	}
	if f.ident == "" {
		return f.d.fetchDirect(ctx, f.name, r)
	}
	return f.d.fetch(ctx, f.name, f.ident, r)
}

// Seek implements io.Seeker (a Parquet reader learns the size by seeking
// to the end).
func (f *File) Seek(offset int64, whence int) (int64, error) {
	if f.local != nil {
		return f.local.Seek(offset, whence)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = f.pos + offset
	case io.SeekEnd:
		abs = f.size + offset
	default:
		return 0, errors.New("seek: invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("seek: negative position")
	}
	f.pos = abs
	return abs, nil
}

// Read implements io.Reader from the Seek position.
func (f *File) Read(p []byte) (int, error) {
	if f.local != nil {
		return f.local.Read(p)
	}
	f.mu.Lock()
	pos := f.pos
	f.mu.Unlock()
	n, err := f.ReadAt(p, pos)
	f.mu.Lock()
	f.pos = pos + int64(n)
	f.mu.Unlock()
	return n, err
}

// Close releases the file and the block it holds.
func (f *File) Close() error {
	if f.local != nil {
		return f.local.Close()
	}
	f.mu.Lock()
	f.closed, f.held, f.tail = true, nil, nil
	f.mu.Unlock()
	return nil
}

// fetch reads a range through the cache, if any.
func (d *Dir) fetch(ctx context.Context, name, ident string, r Range) ([]byte, error) {
	if d.cache != nil {
		if b, ok := d.cache.get(ident, r); ok {
			return b, nil
		}
	}
	b, err := d.fetchDirect(ctx, name, r)
	if err == nil && d.cache != nil {
		d.cache.put(ident, r, b)
	}
	return b, err
}

// fetchDirect reads a range from the bucket in one request, retrying
// transient errors.
func (d *Dir) fetchDirect(ctx context.Context, name string, r Range) ([]byte, error) {
	buf := make([]byte, r.Len)
	attempts := 0
	err := d.retry(ctx, func(ctx context.Context) error {
		attempts++
		rr, err := d.b.NewRangeReader(ctx, name, r.Off, r.Len, nil)
		if err != nil {
			return err
		}
		defer rr.Close()
		_, err = io.ReadFull(rr, buf)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s bytes %d-%d (%d attempts): %w", d.Join(name), r.Off, r.End()-1, attempts, d.wrap(err))
	}
	return buf, nil
}
