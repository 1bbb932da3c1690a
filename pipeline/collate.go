package pipeline

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// Collation: once every sample of a job is built, assemble compacts the
// skipped ones away, sizes the batch's one mask buffer and hands each
// image's rasterisation to the workers; the last rasterisation finishes
// the job into a record that Next hands out in order.

// assemble runs once every sample of j is built: it leaves out the
// samples whose masks would exceed the batch's bound (trimMasks), compacts
// skipped samples away, sizes the batch's one mask buffer at sum_N·Hp·Wp, fills
// the small columns and hands each image's rasterisation to the workers,
// which write straight into their slices of that buffer.
func (l *Loader) assemble(j *job) {
	if l.ctx.Err() != nil {
		return
	}
	t0 := time.Now()
	l.trimMasks(j)
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
	if l.cfg.HasCanvas() {
		c.Canvas = own(8 * n)
		hw := arrow.Int32Traits.CastFromBytes(c.Canvas.Bytes())
		for k := 0; k < n; k++ {
			hw[2*k], hw[2*k+1] = int32(j.liveH), int32(j.liveW)
		}
	}
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
			if !cr.NotCrowd {
				crowd[o+cr.Inst] = 1
			}
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
			// Capacity covers every batch in flight, but like every wait
			// of the loader this one also watches the context.
			select {
			case l.rasters <- rtask{j: j, k: k}:
			case <-l.ctx.Done():
				return
			}
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
				l.skip(j, -1, s.imageID, true, "bad_rle", err)
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
