package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/bufpool"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// Batches is what a trainer consumes: a stream of batch records (schema in
// formats/batch) and the resumable state after the last one returned. The
// local Loader implements it; a remote client can too.
type Batches interface {
	// Next returns the next batch; io.EOF after the last. The caller owns
	// the record and must Release it.
	Next(ctx context.Context) (arrow.RecordBatch, error)
	// State is the position after the last batch Next returned: a new
	// loader started from it continues with the very next batch.
	State() order.State
	// Close stops the stream and frees its resources.
	Close() error
}

// Loader streams training batches from a Source. Next (and All) must be
// called from one goroutine at a time; Stats and State are safe anywhere.
type Loader struct {
	cfg       Config
	src       Source
	blockRows []int
	builder   *batch.Builder
	grid      raster.Grid
	mem       *bufpool.Pool
	cache     *cache
	slotBytes int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	jobs        chan *job // batches in order
	tasks       chan task
	rasters     chan rtask
	free        chan *job
	quit        chan struct{}
	finished    chan struct{}
	outstanding atomic.Int64

	errMu sync.Mutex
	err   error

	stateMu sync.Mutex
	state   order.State
	pending *job

	st      counters
	skipMu  sync.Mutex
	skipped map[string]int64
	start   atomic.Int64 // unix nanos of the first Next
	closed  bool
}

type job struct {
	epoch       int
	epochN      int64
	endConsumed int64
	mode        augment.Mode
	n           int
	samples     []sample
	pending     atomic.Int32
	rasterLeft  atomic.Int32

	kept    []int // sample index of each output row
	instOff []int // first instance of each output row
	images  *memory.Buffer
	cols    batch.Columns
	owned   []*memory.Buffer
	done    chan struct{}
	rec     arrow.RecordBatch
}

type sample struct {
	ok      bool
	imageID int64
	origW   int32
	origH   int32
	xform   geom.Affine
	labels  augment.Labels
}

type task struct {
	j   *job
	i   int
	pos int64
	win *window
	ep  *order.Epoch
}

type rtask struct {
	j *job
	k int // output row
}

type window struct {
	idx    int
	blocks []int
	offs   []int // first row of each block within rows
	rows   []shard.Image
}

func (w *window) row(ep *order.Epoch, p int64) (*shard.Image, int64) {
	b, r := ep.Locate(p)
	for i, bb := range w.blocks {
		if bb == b {
			return &w.rows[w.offs[i]+r], ep.Row(p)
		}
	}
	panic("pipeline: position outside its window") // order guarantees it is inside
}

// New starts a loader over src. Goroutines run until the stream ends, ctx
// is cancelled or Close is called; call Close in every case.
func New(ctx context.Context, src Source, cfg Config) (*Loader, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := c.Augment.ImgSz
	b, err := batch.NewBuilder(s, s, s/c.Stride, s/c.Stride)
	if err != nil {
		return nil, err
	}
	g, err := raster.NewGrid(s, s, c.Stride)
	if err != nil {
		return nil, err
	}
	l := &Loader{
		cfg: c, src: src, blockRows: src.BlockRows(), builder: b, grid: g,
		cache: newCache(c.CacheBytes), slotBytes: 3 * s * s,
		jobs:     make(chan *job, c.Prefetch),
		tasks:    make(chan task, c.Workers),
		rasters:  make(chan rtask, (c.Prefetch+2)*c.BatchSize),
		free:     make(chan *job, c.Prefetch+2),
		quit:     make(chan struct{}),
		finished: make(chan struct{}, 1),
		state:    c.Start,
		skipped:  map[string]int64{},
	}
	// Enough retained memory for every batch in flight plus the ones the
	// consumer holds.
	l.mem = bufpool.New(int64(c.Prefetch+4) * int64(c.BatchSize) * int64(l.slotBytes+g.Cells()*16) * 2)
	l.ctx, l.cancel = context.WithCancel(ctx)
	l.wg.Add(1 + c.Workers)
	go l.dispatch()
	for i := 0; i < c.Workers; i++ {
		go l.work()
	}
	return l, nil
}

func (l *Loader) fail(err error) {
	l.errMu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.errMu.Unlock()
	l.cancel()
}

func (l *Loader) failure() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

func (l *Loader) mode(e int) augment.Mode {
	switch {
	case l.cfg.Val:
		return augment.Val
	case e >= l.cfg.Epochs-l.cfg.CloseMosaic:
		return augment.TrainNoMosaic
	}
	return augment.Train
}

func (l *Loader) dispatch() {
	defer l.wg.Done()
	defer close(l.jobs)
	ctx := l.ctx
	B, W := int64(l.cfg.BatchSize), int64(l.cfg.WorldSize)
	for e := l.cfg.Start.Epoch; e < l.cfg.Epochs; e++ {
		start := int64(0)
		if e == l.cfg.Start.Epoch {
			start = l.cfg.Start.Consumed
		}
		ep, err := order.NewEpoch(l.cfg.Start.Seed, e, l.blockRows, l.cfg.WindowRows)
		if err != nil {
			l.fail(err)
			return
		}
		first, step, count := order.RankPositions(start, ep.N, l.cfg.Rank, l.cfg.WorldSize)
		if count == 0 {
			continue
		}
		wins := make(chan *window, 1)
		rctx, rcancel := context.WithCancel(ctx)
		l.wg.Add(1)
		go l.read(rctx, ep, ep.WindowOf(first), wins)
		var cur *window
		ok := func() bool {
			for k := int64(0); k < count; k += B {
				n := int(min(B, count-k))
				j := l.newJob(e, ep.N, n)
				j.endConsumed = min(start+(k+int64(n))*W, ep.N)
				l.outstanding.Add(1)
				select {
				case l.jobs <- j:
				case <-ctx.Done():
					l.releaseJob(j)
					return false
				}
				for i := 0; i < n; i++ {
					p := first + (k+int64(i))*step
					wi := ep.WindowOf(p)
					for cur == nil || cur.idx < wi {
						select {
						case w, more := <-wins:
							if !more {
								return false // reader failed
							}
							cur = w
						case <-ctx.Done():
							return false
						}
					}
					select {
					case l.tasks <- task{j: j, i: i, pos: p, win: cur, ep: ep}:
					case <-ctx.Done():
						return false
					}
				}
			}
			return true
		}()
		rcancel()
		if !ok {
			return
		}
	}
	close(l.tasks)
	for l.outstanding.Load() > 0 {
		select {
		case <-l.finished:
		case <-ctx.Done():
			return
		}
	}
	close(l.quit)
}

func (l *Loader) read(ctx context.Context, ep *order.Epoch, from int, out chan<- *window) {
	defer l.wg.Done()
	defer close(out)
	for wi := from; wi < len(ep.Windows); wi++ {
		l.prefetch(ep, wi, wi == from)
		t0 := time.Now()
		w := &window{idx: wi, blocks: ep.Windows[wi].Blocks}
		for _, b := range w.blocks {
			rows, err := l.src.ReadBlock(ctx, b)
			if err == nil && len(rows) != l.blockRows[b] {
				err = fmt.Errorf("block %d: %d rows, expected %d", b, len(rows), l.blockRows[b])
			}
			if err != nil {
				if ctx.Err() == nil {
					l.fail(fmt.Errorf("pipeline: read block %d: %w", b, err))
				}
				return
			}
			w.offs = append(w.offs, len(w.rows))
			w.rows = append(w.rows, rows...)
		}
		l.st.read.Add(int64(time.Since(t0)))
		select {
		case out <- w:
		case <-ctx.Done():
			return
		}
	}
}

func (l *Loader) newJob(e int, n int64, size int) *job {
	var j *job
	select {
	case j = <-l.free:
	default:
		j = &job{samples: make([]sample, l.cfg.BatchSize)}
	}
	j.epoch, j.epochN, j.n, j.mode = e, n, size, l.mode(e)
	j.pending.Store(int32(size))
	j.kept, j.instOff, j.owned = j.kept[:0], j.instOff[:0], j.owned[:0]
	j.done = make(chan struct{})
	j.rec = nil
	j.images = l.buffer(size * l.slotBytes)
	return j
}

func (l *Loader) buffer(n int) *memory.Buffer {
	b := memory.NewResizableBuffer(l.mem)
	b.Resize(n)
	return b
}

// releaseJob frees the buffers of a job that will not complete.
func (l *Loader) releaseJob(j *job) {
	if j.images != nil {
		j.images.Release()
		j.images = nil
	}
	for _, b := range j.owned {
		b.Release()
	}
	j.owned = j.owned[:0]
}

type worker struct {
	rng   rand.PCG
	tiles [4]augment.Tile
	ents  [4]*entry
	parts []int64
	rings [][]float32
	z     raster.Rasterizer
}

func (l *Loader) work() {
	defer l.wg.Done()
	w := &worker{}
	tasks := l.tasks
	for {
		// Rasterising finishes a batch the consumer waits for: first.
		select {
		case r := <-l.rasters:
			l.rasterise(w, r)
			continue
		default:
		}
		select {
		case r := <-l.rasters:
			l.rasterise(w, r)
		case t, ok := <-tasks:
			if !ok {
				tasks = nil
				continue
			}
			l.build(w, t)
		case <-l.quit:
			return
		case <-l.ctx.Done():
			return
		}
	}
}

func (l *Loader) skip(j *job, s *sample, row int64, id int64, reason string, err error) {
	l.skipMu.Lock()
	l.skipped[reason]++
	l.skipMu.Unlock()
	l.cfg.Logger.Warn("skipping sample", "row", row, "image_id", id, "epoch", j.epoch, "reason", reason, "err", err)
	if l.cfg.Strict {
		l.fail(fmt.Errorf("pipeline: row %d image %d: %s: %w", row, id, reason, err))
	}
}

// build makes sample t.i of its batch: decode, plan, render straight into
// the batch's image buffer, transform labels.
func (l *Loader) build(w *worker, t task) {
	j, s := t.j, &t.j.samples[t.i]
	s.ok = false
	s.labels.Reset()
	row, id := t.win.row(t.ep, t.pos)
	order.Reseed(&w.rng, l.cfg.Start.Seed, order.StreamSample, uint64(j.epoch), uint64(t.pos))
	defer func() {
		if j.pending.Add(-1) == 0 {
			l.assemble(j)
		}
	}()
	if row.Bytes == nil {
		l.skip(j, s, id, row.ImageID, "bad_row", errors.New("row has no image bytes"))
		return
	}
	e, err := l.decode(row, id)
	if err != nil {
		l.put(e)
		l.skip(j, s, id, row.ImageID, "decode", err)
		return
	}
	w.ents[0] = e
	w.tiles[0] = augment.Tile{Img: &e.img, Instances: row.Instances}
	nt := 1
	if augment.WantMosaic(&l.cfg.Augment, j.mode, &w.rng) {
		nt = 4
		w.parts = t.ep.Partners(w.parts[:0], t.pos, 3)
		for k, q := range w.parts {
			prow, pid := t.win.row(t.ep, q)
			w.tiles[k+1] = augment.Tile{Instances: prow.Instances}
			w.ents[k+1] = nil
			if prow.Bytes == nil {
				l.skip(j, s, pid, prow.ImageID, "partner_bad_row", errors.New("row has no image bytes"))
				continue
			}
			pe, err := l.decode(prow, pid)
			if err != nil {
				l.put(pe)
				l.skip(j, s, pid, prow.ImageID, "partner_decode", err)
				continue
			}
			w.ents[k+1] = pe
			w.tiles[k+1].Img = &pe.img
		}
	}
	t0 := time.Now()
	p := augment.NewPlan(&l.cfg.Augment, j.mode, &w.rng, w.tiles[:nt])
	dst := j.images.Bytes()[t.i*l.slotBytes : (t.i+1)*l.slotBytes]
	err = augment.Render(dst, &p, w.tiles[:nt], l.cfg.Augment.Fill)
	if err == nil {
		augment.BuildLabels(&s.labels, &l.cfg.Augment, &p, w.tiles[:nt])
	}
	l.st.augment.Add(int64(time.Since(t0)))
	for k := 0; k < nt; k++ {
		l.put(w.ents[k])
		w.ents[k], w.tiles[k] = nil, augment.Tile{}
	}
	if err != nil {
		l.fail(fmt.Errorf("pipeline: row %d image %d: %w", id, row.ImageID, err))
		return
	}
	s.ok = true
	s.imageID, s.origW, s.origH = row.ImageID, int32(e.img.W), int32(e.img.H)
	s.xform = p.ToCanvas(0)
	if n := s.labels.CrowdSkipped; n > 0 {
		l.st.crowd.Add(int64(n))
	}
	l.st.dropped.Add(int64(s.labels.Dropped))
}

func (l *Loader) decode(row *shard.Image, id int64) (*entry, error) {
	t0 := time.Now()
	e, decoded := l.cache.get(id, row.Format, row.Bytes)
	if decoded {
		l.st.decode.Add(int64(time.Since(t0)))
	}
	return e, e.err
}

func (l *Loader) put(e *entry) {
	if e != nil {
		l.cache.put(e)
	}
}

// assemble runs once every sample of j is built: it compacts skipped
// samples away, sizes the batch's one mask buffer at sum_N·Hp·Wp, fills
// the small columns and hands each image's rasterisation to the workers,
// which write straight into their slices of that buffer.
func (l *Loader) assemble(j *job) {
	if l.ctx.Err() != nil {
		return
	}
	t0 := time.Now()
	img := j.images.Bytes()
	sumN := 0
	for i := 0; i < j.n; i++ {
		s := &j.samples[i]
		if !s.ok {
			continue
		}
		k := len(j.kept)
		if k != i {
			copy(img[k*l.slotBytes:(k+1)*l.slotBytes], img[i*l.slotBytes:(i+1)*l.slotBytes])
		}
		j.kept = append(j.kept, i)
		j.instOff = append(j.instOff, sumN)
		sumN += s.labels.N()
	}
	n := len(j.kept)
	j.images.Resize(n * l.slotBytes)
	c := &j.cols
	*c = batch.Columns{N: n, SumN: sumN, Images: j.images}
	own := func(size int) *memory.Buffer {
		b := l.buffer(size)
		j.owned = append(j.owned, b)
		return b
	}
	c.ImageIDs, c.OrigHeight, c.OrigWidth = own(8*n), own(4*n), own(4*n)
	c.Transforms, c.BoxesPerImage, c.Offsets = own(48*n), own(4*n), own(4*(n+1))
	c.Boxes, c.Classes, c.Masks = own(16*sumN), own(4*sumN), own(sumN*l.grid.Cells())
	c.IsCrowd = own(sumN)
	crowd := c.IsCrowd.Bytes()
	clear(crowd) // pooled memory
	ids, oh, ow := arrow.Int64Traits.CastFromBytes(c.ImageIDs.Bytes()), arrow.Int32Traits.CastFromBytes(c.OrigHeight.Bytes()), arrow.Int32Traits.CastFromBytes(c.OrigWidth.Bytes())
	xf, bpi, offs := arrow.Float64Traits.CastFromBytes(c.Transforms.Bytes()), arrow.Int32Traits.CastFromBytes(c.BoxesPerImage.Bytes()), arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())
	boxes, classes := arrow.Float32Traits.CastFromBytes(c.Boxes.Bytes()), arrow.Int32Traits.CastFromBytes(c.Classes.Bytes())
	offs[0] = 0
	raster := 0
	for k, i := range j.kept {
		s := &j.samples[i]
		ids[k], oh[k], ow[k] = s.imageID, s.origH, s.origW
		copy(xf[6*k:6*k+6], s.xform[:])
		nk := s.labels.N()
		bpi[k] = int32(nk)
		offs[k+1] = offs[k] + int32(nk)
		o := j.instOff[k]
		copy(boxes[4*o:], s.labels.Boxes)
		copy(classes[o:], s.labels.Classes)
		for _, cr := range s.labels.Crowd {
			crowd[o+cr.Inst] = 1
		}
		if nk > 0 {
			raster++
		}
	}
	j.rasterLeft.Store(int32(raster))
	l.st.collate.Add(int64(time.Since(t0)))
	if raster == 0 {
		l.finish(j)
		return
	}
	for k, i := range j.kept {
		if j.samples[i].labels.N() > 0 {
			l.rasters <- rtask{j: j, k: k} // capacity covers every batch in flight
		}
	}
}

func (l *Loader) rasterise(w *worker, r rtask) {
	t0 := time.Now()
	j := r.j
	s := &j.samples[j.kept[r.k]]
	cells := l.grid.Cells()
	masks := j.cols.Masks.Bytes()
	base := j.instOff[r.k]
	ci := 0
	for k := 0; k < s.labels.N(); k++ {
		dst := masks[(base+k)*cells : (base+k+1)*cells]
		var err error
		var cr *augment.Crowd
		if ci < len(s.labels.Crowd) && s.labels.Crowd[ci].Inst == k {
			cr = &s.labels.Crowd[ci]
			ci++
		}
		if cr != nil && cr.RLE != nil {
			err = w.z.DenseRLE(dst, l.grid, raster.RLE{H: int(cr.RLE.Height), W: int(cr.RLE.Width), Counts: cr.RLE.Counts}, cr.ToCanvas)
			if err != nil {
				clear(dst)
				l.skip(j, s, -1, s.imageID, "bad_rle", err)
				err = nil
			}
		} else {
			w.rings = s.labels.Rings(w.rings[:0], k)
			err = w.z.Dense(dst, l.grid, w.rings)
		}
		if err != nil {
			l.fail(fmt.Errorf("pipeline: image %d instance %d: %w", s.imageID, k, err))
			return
		}
	}
	clear(w.rings)
	if rasterHook != nil {
		rasterHook(masks)
	}
	l.st.raster.Add(int64(time.Since(t0)))
	if j.rasterLeft.Add(-1) == 0 {
		l.finish(j)
	}
}

func (l *Loader) finish(j *job) {
	t0 := time.Now()
	rec, err := l.builder.Build(&j.cols)
	if err != nil {
		l.fail(fmt.Errorf("pipeline: collate: %w", err))
		return
	}
	l.releaseJob(j) // the record holds its own references
	j.rec = rec
	l.st.collate.Add(int64(time.Since(t0)))
	l.st.images.Add(int64(rec.NumRows()))
	close(j.done)
	l.outstanding.Add(-1)
	select {
	case l.finished <- struct{}{}:
	default:
	}
}

// rasterHook, when set by a test, sees the mask buffer each rasterisation
// wrote into.
var rasterHook func(masks []byte)

// Next implements Batches.
func (l *Loader) Next(ctx context.Context) (arrow.RecordBatch, error) {
	if l.closed {
		return nil, errors.New("pipeline: Next after Close")
	}
	if l.start.Load() == 0 {
		l.start.Store(time.Now().UnixNano())
	}
	t0 := time.Now()
	defer func() { l.st.stall.Add(int64(time.Since(t0))) }()
	if l.pending == nil {
		select {
		case j, ok := <-l.jobs:
			if !ok {
				if err := l.failure(); err != nil {
					return nil, err
				}
				return nil, io.EOF
			}
			l.pending = j
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.ctx.Done():
			return nil, l.stopped()
		}
	}
	j := l.pending
	select {
	case <-j.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, l.stopped()
	}
	l.pending = nil
	rec := j.rec
	j.rec = nil
	st := order.State{Seed: l.cfg.Start.Seed, Epoch: j.epoch, Consumed: j.endConsumed}
	if st.Consumed >= j.epochN {
		st.Epoch, st.Consumed = st.Epoch+1, 0
	}
	l.stateMu.Lock()
	l.state = st
	l.stateMu.Unlock()
	l.st.batches.Add(1)
	select {
	case l.free <- j:
	default:
	}
	return rec, nil
}

func (l *Loader) stopped() error {
	if err := l.failure(); err != nil {
		return err
	}
	return context.Cause(l.ctx)
}

// All returns the remaining batches as an iterator; it stops at the end of
// the stream or at the first error (yielded). Each record belongs to the
// loop body, which must Release it.
func (l *Loader) All(ctx context.Context) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for {
			rec, err := l.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// State implements Batches.
func (l *Loader) State() order.State {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return l.state
}

// Close implements Batches: it stops every goroutine, waits for them and
// frees batches built but not returned. Records already returned stay
// valid. Close is idempotent.
func (l *Loader) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	l.cancel()
	l.wg.Wait()
	drop := func(j *job) {
		if j.rec != nil {
			j.rec.Release()
			j.rec = nil
		}
		select {
		case <-j.done:
		default:
			l.releaseJob(j)
		}
	}
	if l.pending != nil {
		drop(l.pending)
		l.pending = nil
	}
	for j := range l.jobs {
		drop(j)
	}
	return nil
}
