package arena

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/internal/predecode"
	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
)

// Entry is one image that will be emitted.
type Entry struct {
	ID       int64
	FileName string // as stored in the shard
	Path     string // where to read it
	Width    int32  // from the image header
	Height   int32
	Format   string
	Size     int64  // file size in bytes when the header was read
	AnnLo    uint32 // Source.Order[AnnLo:AnnHi] are its annotations
	AnnHi    uint32
}

// Header is what an image file's header says.
type Header struct {
	Width, Height int32
	Format        string
	Size          int64 // file size; set by ReadHeader, 0 from DecodeHeader
}

// HeaderError tells why an image file was refused when the dataset was
// opened.
type HeaderError struct {
	Missing bool // the file could not be opened or read
	// TooLarge: the header is sound but its size is over the pixel bound
	// (wraps imagehdr.ErrTooLarge).
	TooLarge bool
	Err      error
}

// Error is the underlying error's message.
func (e *HeaderError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *HeaderError) Unwrap() error { return e.Err }

// Reason is the skip reason the image is counted under.
func (e *HeaderError) Reason() string {
	switch {
	case e.Missing:
		return datasets.ReasonMissingImageFile
	case e.TooLarge:
		return datasets.ReasonImageTooLarge
	}
	return datasets.ReasonCorruptImage
}

// DecodeHeader reads the width, height and format of a JPEG or PNG.
func DecodeHeader(r io.Reader) (Header, error) {
	h, err := imagehdr.ReadFrom(r)
	if err != nil {
		return Header{}, &HeaderError{Err: err}
	}
	if h.Width > math32 || h.Height > math32 {
		return Header{}, &HeaderError{Err: fmt.Errorf("impossible image size %dx%d", h.Width, h.Height)}
	}
	return Header{Width: int32(h.Width), Height: int32(h.Height), Format: h.Format}, nil
}

const math32 = 1<<31 - 1

// Limits bound what ReadHeader accepts. The zero value is the default.
type Limits struct {
	// MaxPixels bounds an image's width·height (<= 0: imagehdr.MaxPixels).
	MaxPixels int64
}

// ReadHeader opens path, reads its header and refuses an image over
// lim.MaxPixels or whose data is incomplete (CheckComplete), so that
// every image a dataset emits is one the loader can decode.
func ReadHeader(path string, lim Limits) (Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, &HeaderError{Missing: true, Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, &HeaderError{Missing: true, Err: err}
	}
	if !st.Mode().IsRegular() {
		return Header{}, &HeaderError{Missing: true, Err: fmt.Errorf("%s is not a regular file", path)}
	}
	hr, err := imagehdr.ReadFrom(f)
	if err != nil {
		return Header{}, &HeaderError{Err: err}
	}
	// Size before completeness: a header claiming 16,000² over a few
	// bytes of data is too large, whatever else is wrong with it.
	if err := hr.Check(lim.MaxPixels, 0); err != nil {
		return Header{}, &HeaderError{TooLarge: errors.Is(err, imagehdr.ErrTooLarge), Err: err}
	}
	if err := CheckComplete(f, st.Size(), hr.Format); err != nil {
		return Header{}, &HeaderError{Err: err}
	}
	return Header{Width: int32(hr.Width), Height: int32(hr.Height), Format: hr.Format, Size: st.Size()}, nil
}

// ScanHeaders reads the header of every path with workers goroutines. The
// result at i belongs to paths[i]; err[i] is a *HeaderError or nil.
func ScanHeaders(ctx context.Context, paths []string, workers int, lim Limits) ([]Header, []error, error) {
	hs := make([]Header, len(paths))
	errs := make([]error, len(paths))
	next := make(chan int)
	var wg sync.WaitGroup
	for range Workers(workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				hs[i], errs[i] = ReadHeader(paths[i], lim)
			}
		}()
	}
	var err error
	for i := range paths {
		select {
		case next <- i:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return hs, errs, err
}

// Workers resolves a worker count option: <= 0 means GOMAXPROCS.
func Workers(n int) int {
	if n <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// Source emits a dataset's rows.
type Source struct {
	Images  []Entry
	Order   []uint32 // annotation indexes into Store.Anns, grouped by image
	Store   *Store
	Workers int // <= 0: GOMAXPROCS
	// Pixels, when set, pre-decodes every row in the reading goroutines
	// (see package predecode).
	Pixels *shard.Pixels

	pool sync.Pool
}

// item is one row under construction; pooled so steady-state emission
// reuses its file buffer, instance slice and coordinate scratch.
type item struct {
	img    shard.Image
	buf    []byte
	coords []float32
	rings  [][]float32
	counts []uint32
	rles   []shard.RLE
	conv   *predecode.Converter // with Source.Pixels
	err    error
}

func (s *Source) get() *item {
	if it, ok := s.pool.Get().(*item); ok {
		return it
	}
	return &item{}
}

func (s *Source) put(it *item) {
	it.img = shard.Image{Instances: it.img.Instances[:0]}
	it.err = nil
	s.pool.Put(it)
}

// Each calls fn for images start, start+1, … in order. Image files are read
// by Workers goroutines ahead of fn; fn runs on the calling goroutine. The
// *shard.Image and everything it references are reused after fn returns.
func (s *Source) Each(ctx context.Context, start int, fn func(*shard.Image) error) error {
	if start < 0 || start > len(s.Images) {
		return fmt.Errorf("start %d outside [0, %d]", start, len(s.Images))
	}
	return Ordered(ctx, len(s.Images)-start, s.Workers,
		func(i int) *item { return s.load(start + i) },
		func(_ int, it *item) error {
			defer s.put(it)
			if it.err != nil {
				return it.err
			}
			return fn(&it.img)
		})
}

// load reads image i's file and assembles its row.
func (s *Source) load(i int) *item {
	e := &s.Images[i]
	it := s.get()
	var err error
	it.buf, err = readFile(e.Path, it.buf[:0])
	if err != nil {
		it.err = fmt.Errorf("image %d %s: %w", e.ID, e.Path, err)
		return it
	}
	h, err := DecodeHeader(bytes.NewReader(it.buf))
	if err != nil || h.Width != e.Width || h.Height != e.Height || h.Format != e.Format || int64(len(it.buf)) != e.Size {
		// The file was checked when the dataset was opened; a change since
		// would shift every later row, so it is an error, not a skip.
		it.err = fmt.Errorf("image %d %s: changed since the dataset was opened (header %dx%d %s %d bytes, err %v; was %dx%d %s %d bytes)",
			e.ID, e.Path, h.Width, h.Height, h.Format, len(it.buf), err, e.Width, e.Height, e.Format, e.Size)
		return it
	}
	it.img.Bytes = it.buf
	s.assemble(e, it)
	if s.Pixels != nil {
		if err := s.converter(it).Convert(&it.img); err != nil {
			// Like a changed file: skipping it would shift later rows.
			it.err = fmt.Errorf("image %d %s: pre-decode: %w (convert with --pixels jpeg to keep the file as it is)", e.ID, e.Path, err)
		}
	}
	return it
}

func (s *Source) converter(it *item) *predecode.Converter {
	if it.conv == nil {
		it.conv = &predecode.Converter{Pixels: *s.Pixels}
	}
	return it.conv
}

// assemble fills it.img from entry e's metadata and annotations, leaving
// Bytes as they are.
func (s *Source) assemble(e *Entry, it *item) {
	it.img.ImageID = e.ID
	it.img.FileName = e.FileName
	it.img.Width, it.img.Height = e.Width, e.Height
	it.img.Format = e.Format

	st := s.Store
	order := s.Order[e.AnnLo:e.AnnHi]
	// Size the scratch first so sub-slices handed out stay valid.
	nc, nr, nn, nrle := 0, 0, 0, 0
	for _, a := range order {
		an := &st.Anns[a]
		nr += int(an.RingHi - an.RingLo)
		if an.RingHi > an.RingLo {
			nc += int(st.RingEnd[an.RingHi-1] - st.RingStart(an.RingLo))
		}
		if an.HasRLE {
			nn += int(an.RLEHi - an.RLELo)
			nrle++
		}
	}
	it.coords = grow(it.coords, nc)
	it.rings = grow(it.rings, nr)
	it.counts = grow(it.counts, nn)
	it.rles = grow(it.rles, nrle)
	ins := grow(it.img.Instances, len(order))[:len(order)]
	for k, a := range order {
		an := &st.Anns[a]
		in := shard.Instance{
			AnnID:      an.ID,
			CategoryID: an.CategoryID,
			Class:      an.Class,
			BBox:       an.BBox,
			Area:       an.Area,
			IsCrowd:    an.Crowd,
		}
		if an.RingHi > an.RingLo {
			r0 := len(it.rings)
			for r := an.RingLo; r < an.RingHi; r++ {
				c0 := len(it.coords)
				it.coords = append(it.coords, st.Ring(r)...)
				it.rings = append(it.rings, it.coords[c0:len(it.coords):len(it.coords)])
			}
			in.Polygons = it.rings[r0:len(it.rings):len(it.rings)]
		}
		if an.HasRLE {
			c0 := len(it.counts)
			it.counts = append(it.counts, st.Counts[an.RLELo:an.RLEHi]...)
			it.rles = append(it.rles, shard.RLE{Height: an.RLEH, Width: an.RLEW, Counts: it.counts[c0:len(it.counts):len(it.counts)]})
			in.RLE = &it.rles[len(it.rles)-1]
		}
		ins[k] = in
	}
	it.img.Instances = ins
}

// RowSizes returns the shard writer's size estimate of every row, from the
// metadata and the file sizes recorded at open, without reading a file:
// what a distributed conversion plans its shard boundaries with.
func (s *Source) RowSizes(ctx context.Context) ([]int64, error) {
	sizes := make([]int64, len(s.Images))
	it := s.get()
	defer s.put(it)
	for i := range s.Images {
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e := &s.Images[i]
		it.img.Bytes = nil
		s.assemble(e, it)
		if s.Pixels != nil {
			if err := s.converter(it).Frame(&it.img); err != nil {
				return nil, fmt.Errorf("image %d %s: %w", e.ID, e.Path, err)
			}
		}
		sizes[i] = shard.PlannedRowSize(&it.img, e.Size)
	}
	return sizes, nil
}

// grow returns s emptied, with capacity for at least n elements.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// readFile reads path into buf, reusing its capacity.
func readFile(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return buf, err
	}
	n := int(st.Size())
	if cap(buf) < n+1 {
		buf = make([]byte, 0, n+512)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
