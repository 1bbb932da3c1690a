package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Scheduling: the dispatcher walks this rank's epoch positions in order,
// draws a job (a batch being built) from the pool for every BatchSize of
// them and hands one task per sample to the workers; the reader goroutine
// of each epoch reads its shuffle windows ahead of the dispatcher.

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
		ep, err := l.epochOrder(e)
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
				l.shapeJob(j, ep, first+k*step, step)
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
			var dmg *Damage
			if errors.As(err, &dmg) {
				err = nil
				for k := range dmg.Rows {
					br := &dmg.Rows[k]
					if br.Row < 0 || br.Row >= len(rows) {
						err = fmt.Errorf("block %d: damaged row %d of %d", b, br.Row, len(rows))
						break
					}
					if w.bad == nil {
						w.bad = map[int]*BadRow{}
					}
					w.bad[len(w.rows)+br.Row] = br
				}
			}
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

// epochOrder is epoch e's sample order: the shuffle, or under Rect the
// rows by aspect ratio (but for rect training whose batches all take one
// shape, where Ultralytics shuffles).
func (l *Loader) epochOrder(e int) (*order.Epoch, error) {
	if l.rectKeys != nil && l.rectOne[0] == 0 {
		return order.NewSortedEpoch(l.cfg.Start.Seed, e, l.blockRows, l.rectKeys)
	}
	return order.NewEpoch(l.cfg.Start.Seed, e, l.blockRows, l.cfg.WindowRows)
}

// shapeJob sets the live canvas of j, whose samples are at positions
// p0, p0+step, … of ep: under Rect the shape of their aspect ratios
// (RectShape), under MultiScale a side drawn from the batch's stream
// (seed, epoch, p0), which neither the worker count nor their timing
// changes; else the whole canvas.
func (l *Loader) shapeJob(j *job, ep *order.Epoch, p0, step int64) {
	j.liveH, j.liveW = l.canvas, l.canvas
	switch {
	case l.rectOne[0] != 0:
		j.liveH, j.liveW = l.rectOne[0], l.rectOne[1]
	case l.rectKeys != nil:
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := 0; i < j.n; i++ {
			ar := l.rectKeys[ep.Row(p0+int64(i)*step)]
			lo, hi = min(lo, ar), max(hi, ar)
		}
		j.liveH, j.liveW = l.cfg.rectShape(lo, hi, l.cfg.Augment.ImgSz)
	case l.cfg.MultiScale > 0:
		rng := order.NewRand(l.cfg.Start.Seed, order.StreamBatch, uint64(j.epoch), uint64(p0))
		sz := MultiScaleSize(rng, l.cfg.Augment.ImgSz, l.cfg.MultiScale)
		j.aug = l.cfg.Augment
		j.aug.ImgSz = sz
		j.liveH, j.liveW = sz, sz
	}
}

// aspectRatios reads every row of src once for its aspect ratio (source
// height / width, Ultralytics' from the image file): Rect's sort keys,
// by dataset row. A row without a size (damaged, or built by hand) counts
// as square; it is skipped or letterboxed into its batch's shape later
// like any other.
func aspectRatios(ctx context.Context, src Source, rows int) ([]float64, error) {
	keys := make([]float64, 0, rows)
	for b, n := range src.BlockRows() {
		rs, err := src.ReadBlock(ctx, b)
		var dmg *Damage
		if errors.As(err, &dmg) {
			err = nil
		}
		if err == nil && len(rs) != n {
			err = fmt.Errorf("%d rows, expected %d", len(rs), n)
		}
		if err != nil {
			return nil, fmt.Errorf("pipeline: rect: read block %d: %w", b, err)
		}
		for i := range rs {
			ar := 1.0
			if w, h := rs[i].SourceSize(); w > 0 && h > 0 {
				ar = float64(h) / float64(w)
			}
			keys = append(keys, ar)
		}
	}
	return keys, nil
}
