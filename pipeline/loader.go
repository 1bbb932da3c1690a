package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/imagehdr"
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
	maskRule  raster.Rule // Augment.MaskRule
	mem       *bufpool.Pool
	cache     *cache
	slotBytes int
	lim       limits
	gate      *decodeGate // nil without a memory budget

	// rectAug is the table of rect training samples: mosaic, mixup and
	// cutmix off, as Ultralytics turns them off with rect.
	rectAug augment.Config
	// valAug is the augmentation table of Val samples: the candidate rule
	// off, since Ultralytics validates on every ground-truth instance.
	valAug augment.Config
	// canvas is the side of every record's square canvas (CanvasSide);
	// rectKeys, under Rect, each dataset row's aspect ratio h/w.
	canvas   int
	rectKeys []float64
	// rectOne, under Rect in training, is the one shape every batch of
	// the sorted set would have: Ultralytics keeps its shuffle then, so
	// the epochs are shuffled and every batch takes that shape.
	rectOne [2]int

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
	causes  []string     // the first distinct skip errors, for an epoch that delivers nothing
	start   atomic.Int64 // unix nanos of the first Next
	closed  bool

	// The epoch of the last batch Next took, and the images and the
	// emptied batches of that epoch.
	epoch                     int
	epochImages, epochEmptied int64
}

type job struct {
	epoch       int
	epochN      int64
	endConsumed int64
	mode        augment.Mode
	n           int
	// The batch's live canvas (the whole canvas unless Rect or
	// MultiScale), and under MultiScale its samples' table, at that side.
	liveH, liveW int
	aug          augment.Config
	samples      []sample
	pending      atomic.Int32
	rasterLeft   atomic.Int32

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
	row     int64 // dataset row id, for skips decided at collation
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
	bad    map[int]*BadRow // rows the source could not deliver, by index in rows
}

// row returns the row at epoch position p, its dataset row id and, when
// the source reported it damaged, why.
func (w *window) row(ep *order.Epoch, p int64) (*shard.Image, int64, *BadRow) {
	b, r := ep.Locate(p)
	for i, bb := range w.blocks {
		if bb == b {
			k := w.offs[i] + r
			return &w.rows[k], ep.Row(p), w.bad[k]
		}
	}
	panic("pipeline: position outside its window") // order guarantees it is inside
}

// New starts a loader over src. Goroutines run until the stream ends, ctx
// is cancelled or Close is called; call Close in every case.
func New(ctx context.Context, src Source, cfg Config) (*Loader, error) {
	c := cfg.defaults()
	if err := c.validateShape(); err != nil {
		return nil, err
	}
	src = c.Subset(src)
	// Judged with the source's own row sizes where it knows them.
	if err := c.checkMemory(src); err != nil {
		return nil, err
	}
	var rows int
	for _, n := range src.BlockRows() {
		rows += n
	}
	if rows == 0 {
		return nil, emptySet(src)
	}
	var keys []float64
	if c.Rect {
		// One window of the whole set, whose memory the estimate counts.
		c.WindowRows = rows
		if err := c.checkMemory(src); err != nil {
			return nil, err
		}
		var err error
		if keys, err = aspectRatios(ctx, src, rows); err != nil {
			return nil, err
		}
	}
	s := c.CanvasSide()
	b, err := c.NewBatchBuilder()
	if err != nil {
		return nil, err
	}
	g, err := raster.NewGrid(s, s, c.Stride)
	if err != nil {
		return nil, err
	}
	rule, err := raster.ParseRule(c.Augment.MaskRule)
	if err != nil {
		return nil, err
	}
	ic := c.ImageCache
	if ic == nil {
		ic = NewImageCache(c.CacheBytes)
	}
	l := &Loader{
		cfg: c, src: src, blockRows: src.BlockRows(), builder: b, grid: g, maskRule: rule,
		cache: ic.c, slotBytes: 3 * s * s,
		jobs:     make(chan *job, c.Prefetch),
		tasks:    make(chan task, c.Workers),
		rasters:  make(chan rtask, (c.Prefetch+2)*c.BatchSize),
		free:     make(chan *job, c.Prefetch+2),
		quit:     make(chan struct{}),
		finished: make(chan struct{}, 1),
		state:    c.Start,
		skipped:  map[string]int64{},
		lim:      c.limits(src),
		valAug:   keepEveryInstance(c.Augment),
		rectAug:  withoutMosaic(c.Augment),
		canvas:   s,
		rectKeys: keys,
	}
	if c.Rect && !c.Val {
		l.rectOne = oneRectShape(keys, c.BatchSize, c.Augment.ImgSz)
	}
	if l.lim.imageBytes > 0 {
		l.gate = newDecodeGate(l.lim.imageBytes - EstimateImageBytes)
	}
	// Enough retained memory for every batch in flight plus the ones the
	// consumer holds: the batch part of the memory estimate.
	l.mem = bufpool.NewOn(c.Allocator, c.memory(src).Batches)
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

type worker struct {
	rng rand.PCG

	// tiles 0-3: the sample's (mosaic); 4-7: its mixup partner's; 8-11:
	// its cutmix partner's; 12-15: its copy-paste source's (mixup mode);
	// 16-19 and 20-23: the mixup and the cutmix partner's copy-paste
	// sources (mixup mode).
	tiles [24]augment.Tile
	ents  [24]*entry
	insts [24][]shard.Instance // a tile's instances when some were left out
	parts []int64
	// The mix partners: their plans (mixup, cutmix, the sample's paste),
	// tile counts (0: none; mixup, cutmix, the sample's paste source and
	// the partners' paste sources, as the tiles), the parts RenderMix
	// takes, the cutmix partner's labels and a partner's image; the
	// partners' own pastes (mixup's, cutmix's).
	plans     [3]augment.Plan
	mt        [5]int
	mix       []augment.Part
	cutLabels augment.Labels
	scratch   []byte
	rings     [][]float32
	z         raster.Rasterizer
	paster    augment.Paster
	pp        [2]augment.PartnerPaste
}

func (l *Loader) work() {
	defer l.wg.Done()
	w := &worker{z: raster.Rasterizer{Rule: l.maskRule}}
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

// build makes sample t.i of its batch: decode, plan, render straight into
// the batch's image buffer, transform labels.
func (l *Loader) build(w *worker, t task) {
	j, s := t.j, &t.j.samples[t.i]
	s.ok = false
	s.labels.Reset()
	row, id, bad := t.win.row(t.ep, t.pos)
	order.Reseed(&w.rng, l.cfg.Start.Seed, order.StreamSample, uint64(j.epoch), uint64(t.pos))
	defer func() {
		if j.pending.Add(-1) == 0 {
			l.assemble(j)
		}
	}()
	if bad != nil {
		l.skip(j, id, bad.ImageID, bad.HasImageID, bad.Reason, bad.Err)
		return
	}
	if row.Bytes == nil {
		l.skip(j, id, row.ImageID, true, SkipBadRow, errNoBytes)
		return
	}
	e, reason, err := l.load(row, id)
	if err != nil {
		l.skip(j, id, row.ImageID, true, reason, err)
		return
	}
	w.ents[0] = e
	w.tiles[0] = augment.Tile{Img: &e.img, Instances: l.instances(w, 0, j, id, row)}
	nt := 1
	acfg := l.sampleConfig(j)
	if augment.WantMosaic(acfg, j.mode, &w.rng) {
		nt = 4
		// Partner positions: 0-2 the sample's mosaic, 3 its mixup partner,
		// 4-6 that one's mosaic. A prefix of the stream, so a mosaic's
		// partners do not depend on whether mixup is on.
		w.parts = t.ep.Partners(w.parts[:0], t.pos, 3)
		for k, q := range w.parts {
			l.partner(w, j, t, k+1, q)
		}
	}
	t0 := time.Now()
	var p augment.Plan
	switch {
	case l.rectKeys != nil && j.mode == augment.Val:
		p = l.rectPlan(j, w.tiles[0])
	case l.rectKeys != nil:
		p = augment.NewRectPlan(acfg, j.mode, &w.rng, w.tiles[:nt], j.liveH, j.liveW)
	default:
		p = augment.NewPlan(acfg, j.mode, &w.rng, w.tiles[:nt])
	}
	// Copy-paste (Ultralytics' CopyPaste, before MixUp): flip mode pastes
	// the sample's own instances mirrored; mixup mode a fourth sample's,
	// at partner positions 11 (its mosaic 12-14), drawn here.
	var pasteTiles []augment.Tile
	pasting := augment.WantCopyPaste(acfg, j.mode, &w.rng)
	if pasting {
		pasteTiles = w.tiles[:nt]
		if acfg.CopyPasteMode == augment.PasteMixup {
			w.parts = t.ep.Partners(w.parts[:0], t.pos, 15)
			w.mt[2] = l.partnerTiles(w, j, t, 12, w.parts[11:15], &t0)
			pasteTiles = w.tiles[12 : 12+w.mt[2]]
		}
		w.plans[2] = augment.NewPastePlan(acfg, &p, &w.rng, pasteTiles)
	}
	// Mixup and cutmix (Ultralytics' MixUp, then CutMix): a second and a
	// third sample, each with its own mosaic and perspective, drawn from
	// the same stream after the first's plan. Partner positions: 0-2 the
	// sample's mosaic, 3 the mixup partner, 4-6 its mosaic, 7 the cutmix
	// partner, 8-10 its mosaic.
	parts := w.parts[:0:0]
	mixed := augment.WantMixup(acfg, j.mode, &w.rng)
	if mixed || l.cfg.Augment.Cutmix > 0 {
		w.parts = t.ep.Partners(w.parts[:0], t.pos, 11)
		parts = w.parts
	}
	if mixed {
		w.mt[0] = l.partnerTiles(w, j, t, 4, parts[3:7], &t0)
		w.plans[0] = augment.NewMixPlan(acfg, &p, &w.rng, w.tiles[4:4+w.mt[0]])
		w.mix = append(w.mix[:0], augment.Part{Plan: &w.plans[0], Tiles: w.tiles[4 : 4+w.mt[0]]})
	}
	augment.BuildLabels(&s.labels, acfg, &p, w.tiles[:nt])
	if pasting && augment.Paste(&s.labels, acfg, &w.plans[2], pasteTiles, 0, &w.paster) {
		w.mix = slices.Insert(w.mix, 0, augment.Part{Plan: &w.plans[2], Tiles: pasteTiles}) // before the mixup blend
	}
	if mixed {
		// Ultralytics draws a mixup partner through the sample's own
		// pre-transform, flip-mode CopyPaste included: the partner's
		// instances are pasted mirrored among themselves (l[from:]) and
		// its image gets the pasted pixels before the blend.
		from, pt := s.labels.N(), w.tiles[4:4+w.mt[0]]
		augment.BuildLabels(&s.labels, acfg, &w.plans[0], pt)
		if l.partnerPaste(w, j, t, 0, acfg, &t0) && w.pp[0].Apply(acfg, &w.plans[0], &w.rng, pt, &s.labels, from) {
			w.mix[len(w.mix)-1].Paste = w.pp[0].Part()
		}
	}
	if augment.WantCutmix(acfg, j.mode, &w.rng) {
		w.mt[1] = l.partnerTiles(w, j, t, 8, parts[7:11], &t0)
		var ok bool
		var pp *augment.PartnerPaste
		if l.partnerPaste(w, j, t, 1, acfg, &t0) {
			pp = &w.pp[1]
		}
		w.plans[1], ok = augment.NewCutPlan(acfg, &p, &w.rng, w.tiles[8:8+w.mt[1]], &s.labels, &w.cutLabels, pp)
		if ok {
			augment.AppendCut(&s.labels, &w.plans[1], &w.cutLabels)
			w.mix = append(w.mix, augment.Part{Plan: &w.plans[1], Tiles: w.tiles[8 : 8+w.mt[1]], Paste: pp.Part()})
		}
	}
	slot := j.images.Bytes()[t.i*l.slotBytes : (t.i+1)*l.slotBytes]
	dst := slot[:3*p.Out*p.Out] // a multi-scale side below the canvas': spread after
	if len(w.mix) == 0 {
		err = augment.Render(dst, &p, w.tiles[:nt], l.cfg.Augment.Fill)
	} else {
		n := augment.MixScratch(len(dst), w.mix)
		if cap(w.scratch) < n {
			w.scratch = make([]byte, n)
		}
		w.scratch = w.scratch[:n]
		err = augment.RenderMix(dst, w.scratch, &p, w.tiles[:nt], w.mix, l.cfg.Augment.Fill)
		w.mix = w.mix[:0]
	}
	if err == nil && p.Out != l.canvas {
		spreadCanvas(slot, p.Out, l.canvas, l.cfg.Augment.Fill)
	}
	l.st.augment.Add(int64(time.Since(t0)))
	for k := range w.tiles {
		if k < nt || (k >= 4 && (k-4)%4 < w.mt[(k-4)/4]) {
			l.put(w.ents[k])
			w.ents[k], w.tiles[k] = nil, augment.Tile{}
		}
	}
	w.mt = [5]int{}
	if err != nil {
		l.fail(fmt.Errorf("pipeline: row %d image %d: %w", id, row.ImageID, err))
		return
	}
	s.ok = true
	s.row = id
	s.imageID = row.ImageID
	s.origW, s.origH, s.xform = sourceFrame(row, &e.img, p.ToCanvas(0))
	if n := s.labels.CrowdSkipped; n > 0 {
		l.st.crowd.Add(int64(n))
	}
	l.st.dropped.Add(int64(s.labels.Dropped))
}

// load checks row and returns its decoded image, or why it is skipped:
// a row over shard.MaxInstances, an image over the size bounds
// (imagehdr.ReasonTooLarge) or one that does not decode ("decode"). The
// checks come before any label work or pixel buffer.
func (l *Loader) load(row *shard.Image, id int64) (*entry, string, error) {
	if n := len(row.Instances); n > shard.MaxInstances {
		return nil, shard.ReasonTooManyInstances, fmt.Errorf("%d instances, over the limit of %d an image", n, shard.MaxInstances)
	}
	w, h, bpp, err := l.cache.size(id, row, &l.lim)
	if errors.Is(err, imagehdr.ErrTooLarge) {
		return nil, imagehdr.ReasonTooLarge, err
	}
	if err != nil {
		return nil, "decode", err
	}
	// Beyond its share of the estimate, a large decode waits for the
	// budget's headroom rather than adding to the others'.
	if extra := imagehdr.DecodeBytes(w, h, bpp) - EstimateImageBytes; l.gate != nil && extra > 0 {
		if err := l.gate.acquire(l.ctx, extra); err != nil {
			return nil, "decode", err
		}
		defer l.gate.release(extra)
	}
	e, err := l.decode(row, id, w, h, bpp)
	if err != nil {
		l.put(e)
		return nil, "decode", err
	}
	return e, "", nil
}

// partnerPaste draws whether mix partner i (0 mixup, 1 cutmix) gets its
// own copy-paste, as the sample's is drawn (WantCopyPaste: flip mode
// without a draw), and in mixup mode loads its source: partner position
// 15+4i (its mosaic 16+4i to 18+4i) into tiles 16+4i on, w.pp[i].Src.
func (l *Loader) partnerPaste(w *worker, j *job, t task, i int, acfg *augment.Config, t0 *time.Time) bool {
	pp := &w.pp[i]
	pp.Src = nil
	if !augment.WantCopyPaste(acfg, j.mode, &w.rng) {
		return false
	}
	if acfg.CopyPasteMode == augment.PasteMixup {
		w.parts = t.ep.Partners(w.parts[:0], t.pos, 23)
		k := 16 + 4*i
		w.mt[3+i] = l.partnerTiles(w, j, t, k, w.parts[15+4*i:19+4*i], t0)
		pp.Src = w.tiles[k : k+w.mt[3+i]]
	}
	return true
}

// partnerTiles loads a mix partner (pos[0]) into tile k of w and, when
// its mosaic draw says so, pos[1:4] after it; it returns the number of
// tiles. Loading time is not augmentation time: *t0 moves past it.
func (l *Loader) partnerTiles(w *worker, j *job, t task, k int, pos []int64, t0 *time.Time) int {
	l.st.augment.Add(int64(time.Since(*t0)))
	defer func() { *t0 = time.Now() }()
	l.partner(w, j, t, k, pos[0])
	if !augment.WantMosaic(&l.cfg.Augment, augment.Train, &w.rng) {
		return 1
	}
	for i, q := range pos[1:4] {
		l.partner(w, j, t, k+1+i, q)
	}
	return 4
}

// partner loads the partner at position q into tile k of w: a damaged
// or undecodable one is counted (PartnerPrefix) and left without an image,
// its area filled, as a missing mosaic tile is.
func (l *Loader) partner(w *worker, j *job, t task, k int, q int64) {
	prow, pid, pbad := t.win.row(t.ep, q)
	w.tiles[k] = augment.Tile{Instances: prow.Instances}
	w.ents[k] = nil
	if pbad != nil {
		l.skip(j, pid, pbad.ImageID, pbad.HasImageID, PartnerPrefix+pbad.Reason, pbad.Err)
		return
	}
	if prow.Bytes == nil {
		l.skip(j, pid, prow.ImageID, true, PartnerPrefix+SkipBadRow, errNoBytes)
		return
	}
	pe, reason, err := l.load(prow, pid)
	if err != nil {
		l.skip(j, pid, prow.ImageID, true, PartnerPrefix+reason, err)
		return
	}
	w.ents[k] = pe
	w.tiles[k] = augment.Tile{Img: &pe.img, Instances: l.instances(w, k, j, pid, prow)}
}

// instances returns row's instances for tile k, leaving out (and counting
// under SkipBadClass) those whose class is outside the set's categories,
// with Config.Classes and Config.SingleClass applied (limits.validClasses).
func (l *Loader) instances(w *worker, k int, j *job, id int64, row *shard.Image) []shard.Instance {
	ins, bad := l.lim.validClasses(row.Instances, &w.insts[k])
	for _, i := range bad {
		l.skip(j, id, row.ImageID, true, SkipBadClass, fmt.Errorf("instance %d (ann %d): class %d outside [0,%d)",
			i, row.Instances[i].AnnID, row.Instances[i].Class, l.lim.classes))
	}
	return ins
}

func (l *Loader) decode(row *shard.Image, id int64, w, h, bpp int) (*entry, error) {
	t0 := time.Now()
	e, decoded := l.cache.get(id, row, w, h, bpp)
	if decoded {
		l.st.decode.Add(int64(time.Since(t0)))
		l.st.decodes.Add(1)
	} else {
		l.st.hits.Add(1)
	}
	return e, e.err
}

func (l *Loader) put(e *entry) {
	if e != nil {
		l.cache.put(e)
	}
}

var errNoBytes = errors.New("row has no image bytes")

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
	// A batch whose every sample was skipped is never returned: the next
	// batch takes its place, as a loader that skips damage would go on to
	// the next samples. An epoch of this run that delivers nothing at all
	// is an error.
	for {
		j, err := l.nextJob(ctx)
		if err == io.EOF {
			if err := l.endEpoch(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		if err != nil {
			return nil, err
		}
		rec := j.rec
		j.rec = nil
		if j.epoch != l.epoch {
			if err := l.endEpoch(); err != nil {
				rec.Release()
				return nil, err
			}
			l.epoch, l.epochImages, l.epochEmptied = j.epoch, 0, 0
		}
		st := order.State{Seed: l.cfg.Start.Seed, Epoch: j.epoch, Consumed: j.endConsumed}
		if st.Consumed >= j.epochN {
			st.Epoch, st.Consumed = st.Epoch+1, 0
		}
		l.stateMu.Lock()
		l.state = st
		l.stateMu.Unlock()
		select {
		case l.free <- j:
		default:
		}
		if rec.NumRows() == 0 {
			rec.Release()
			l.st.emptied.Add(1)
			l.epochEmptied++
			continue
		}
		l.epochImages += rec.NumRows()
		l.st.batches.Add(1)
		return rec, nil
	}
}

// nextJob waits for the next batch in order; io.EOF at the end of the
// schedule.
func (l *Loader) nextJob(ctx context.Context) (*job, error) {
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
	return j, nil
}

// endEpoch is called when Next leaves an epoch: an epoch whose batches
// this run took and that delivered no image fails the stream, naming the
// skips (each names its shard) that emptied it.
func (l *Loader) endEpoch() error {
	if l.epochImages > 0 || l.epochEmptied == 0 {
		return nil
	}
	l.skipMu.Lock()
	sum := SkipSummary{Skipped: maps.Clone(l.skipped)}
	causes := slices.Clone(l.causes)
	l.skipMu.Unlock()
	err := fmt.Errorf("pipeline: epoch %d delivered no sample: every one was skipped (%s); first causes: %s",
		l.epoch, sum, strings.Join(causes, "; "))
	l.fail(err)
	return err
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
// frees batches built but not returned and the buffers the pool retains.
// Records already returned stay valid; their buffers are freed when they
// are released. Close is idempotent.
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
	// Retained buffers go back to Config.Allocator now; those of records
	// still held go back when they are released.
	l.mem.Close()
	return nil
}

// sampleConfig returns the augmentation table a sample of j is made with:
// validation's without the candidate rule, a multi-scale batch's at its
// side, rect training's without mosaic, else the loader's.
func (l *Loader) sampleConfig(j *job) *augment.Config {
	switch {
	case j.mode == augment.Val:
		return &l.valAug
	case l.cfg.MultiScale > 0:
		return &j.aug
	case l.rectKeys != nil:
		return &l.rectAug
	}
	return &l.cfg.Augment
}

// oneRectShape returns the shape every rect training batch of keys (the
// rows' aspect ratios) takes, in sorted order and batches of n as
// Ultralytics' set_rectangle cuts them, when they all take one; else 0, 0.
func oneRectShape(keys []float64, n, s int) [2]int {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	var one [2]int
	for i := 0; i < len(sorted); i += n {
		b := sorted[i:min(i+n, len(sorted))]
		h, w := RectTrainShape(b[0], b[len(b)-1], s)
		if i > 0 && (h != one[0] || w != one[1]) {
			return [2]int{}
		}
		one = [2]int{h, w}
	}
	return one
}

// withoutMosaic returns c with mosaic, mixup and cutmix off: Ultralytics'
// table under rect training (build_transforms), where every sample keeps
// its own batch's shape.
func withoutMosaic(c augment.Config) augment.Config {
	c.Mosaic, c.Mixup, c.Cutmix = 0, 0, 0
	return c
}

// keepEveryInstance returns c with the candidate rule off: Ultralytics
// validates on every ground-truth instance (its box_candidates is part of
// RandomPerspective, a training transform; validation only letterboxes).
// An instance with nothing on the canvas, or whose box has no area before
// and after clipping (a degenerate polygon), still has no mask to score
// and is dropped.
func keepEveryInstance(c augment.Config) augment.Config {
	c.MinSide, c.MinArea, c.MaxAspect = -1, -1, math.Inf(1)
	return c
}

// rectPlan is the plan of a Val sample of a rect batch: Ultralytics'
// load_image (long side to imgsz) then LetterBox to the batch's shape
// (centred, scaleup off), as one resize from the decoded image, on the
// loader's canvas whose top-left liveH×liveW is the batch's.
func (l *Loader) rectPlan(j *job, t augment.Tile) augment.Plan {
	id := [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}
	p := augment.Plan{Out: l.canvas, Sc: l.canvas, NTiles: 1, M: id, Minv: id}
	p.Rect[0] = geom.Rect{X0: 1, X1: 0} // empty: no image
	if t.Img == nil || t.Img.W <= 0 || t.Img.H <= 0 {
		return p
	}
	w0, h0 := t.Img.W, t.Img.H
	w, h := loadSize(w0, h0, l.cfg.Augment.ImgSz)
	r := min(float64(j.liveH)/float64(h), float64(j.liveW)/float64(w), 1)
	nw := max(int(math.RoundToEven(float64(w)*r)), 1) // Python's round
	nh := max(int(math.RoundToEven(float64(h)*r)), 1)
	left := math.Round(float64(j.liveW-nw)/2 - 0.1) // never a tie: no rounding rule to match
	top := math.Round(float64(j.liveH-nh)/2 - 0.1)
	p.Place[0] = geom.Affine{float64(nw) / float64(w0), 0, left, 0, float64(nh) / float64(h0), top}
	p.Rect[0] = geom.Rect{X0: float32(left), Y0: float32(top), X1: float32(left + float64(nw)), Y1: float32(top + float64(nh))}
	return p
}

// loadSize is Ultralytics' load_image size: long side s, ceil, capped at s.
func loadSize(w0, h0, s int) (w, h int) {
	r := float64(s) / float64(max(w0, h0))
	if r == 1 {
		return w0, h0
	}
	return min(int(math.Ceil(float64(w0)*r)), s), min(int(math.Ceil(float64(h0)*r)), s)
}

// spreadCanvas lays the CHW image of side s at the front of slot out at
// the top left of a canvas of side c (row stride c), in place, and fills
// the rest. Every row moves to an offset at or past its own, so walking
// from the last plane's last row back never overwrites a row not yet
// moved.
func spreadCanvas(slot []byte, s, c int, fill uint8) {
	for ch := 2; ch >= 0; ch-- {
		plane := slot[ch*c*c : (ch+1)*c*c]
		fillBytes(plane[s*c:], fill)
		for y := s - 1; y >= 0; y-- {
			row := plane[y*c : (y+1)*c]
			copy(row, slot[ch*s*s+y*s:ch*s*s+(y+1)*s])
			fillBytes(row[s:], fill)
		}
	}
}

func fillBytes(b []byte, v uint8) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for k := 1; k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}
