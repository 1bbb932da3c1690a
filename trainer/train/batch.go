package train

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// gradSet is what a training step keeps on the backend from one batch to
// the next: the batch's buffers and the loss's.
type gradSet struct {
	batch deviceBatch
	loss  deviceLoss
	// pending is the latest step's loss on its way down from a
	// backend.Fetcher, read once the next step is queued (or at the
	// epoch's end, a save or an interruption: trainer.settle).
	pending stepLoss
}

// deviceBatch is the batch on the run's backend. Its upload is the one
// crossing of a batch onto the device: the images as uint8 (widened on
// the backend) and the loss targets (boxes float32, classes and
// boxes_per_image int32, iscrowd and the mask stack as the loader's
// bytes), six uploads whatever the batch. On a backend that stages
// batches (backend.Stager: cuda) the six parts go up together through its
// double-buffered staging on a copy stream, beside the previous step;
// elsewhere (cpu, emu) through UploadBytes into buffers reused while large
// enough. The counts and bytes are the same either way.
//
// A windowed record (batch.IsWindowed: the `--remote` transport's masks
// as per-instance windows and their bytes, from remote's OpenWindowed)
// goes up windowed on a backend that expands windows and stages
// (ExpandsWindows: cuda): the window table (backend.WindowExpander's
// WindowTable, which checks the windows as the host expansion does) and
// the window bytes are staged in place of the dense stack — seven parts —
// and expanded on the device into a dense uint8 stack that the loss reads
// as it reads a staged one; that buffer is reused from batch to batch,
// grown when too small. On any other backend the windows are expanded on
// the host (raster.Expand) and the batch goes up as a dense one, so every
// backend trains on either form.
type deviceBatch struct {
	targets loss.DeviceTargets
	bpi     []int32
	// staged is the Stager the current batch went up through, told when
	// the step that reads it is queued (done).
	staged backend.Stager
	// table is the host window table of a windowed batch, masks the
	// device stack it expands into (ExpandsWindows); hostMasks the host
	// expansion's stack elsewhere.
	table     []byte
	masks     backend.Buffer
	hostMasks []byte
}

// ExpandsWindows reports whether training on be takes windowed batches
// windowed — the windows staged and expanded on the device — rather than
// expanded on the host: be is a backend.WindowExpander and a
// backend.Stager (cuda). A data source that can deliver either form
// (remote's Client.OpenWindowed or Open) asks for it by this.
func ExpandsWindows(be backend.Backend) bool {
	_, wx := be.(backend.WindowExpander)
	_, st := be.(backend.Stager)
	return wx && st
}

// maskWindows reads a windowed record's mask part (batch.MaskWindowsOf)
// and checks that it splits like the targets: bpi[i] windows for image i.
func maskWindows(rec arrow.RecordBatch, bpi []int) (batch.MaskWindows, error) {
	mw, err := batch.MaskWindowsOf(rec)
	if err != nil {
		return mw, err
	}
	return mw, mw.CheckCounts(bpi)
}

// expandHost writes the dense stack of mw's windows into dst (grown when
// short): raster.ExpandWindows, which refuses windows outside the grid
// and data that does not match them.
func expandHost(dst []byte, mw batch.MaskWindows) ([]byte, error) {
	dst, err := raster.ExpandWindows(dst, mw)
	if err != nil {
		return dst, fmt.Errorf("batch: %w", err)
	}
	return dst, nil
}

// upload sends rec to be and returns the image tensor, [B, 3, H, W] in
// [0, 1], and the targets the loss reads there. Both are valid until the
// next upload; rec may be released as soon as upload returns. Call done
// once the step that reads them is queued.
func (d *deviceBatch) upload(be backend.Backend, rec arrow.RecordBatch) (*tensor.Tensor, *loss.DeviceTargets, error) {
	windowed := batch.IsWindowed(rec.Schema())
	var tg *loss.Targets
	var err error
	if windowed {
		tg, err = loss.TargetsWithoutMasks(rec)
	} else {
		tg, err = loss.TargetsFromRecord(rec)
	}
	if err != nil {
		return nil, nil, err
	}
	img, err := batch.ImageTensor(rec)
	if err != nil {
		return nil, nil, err
	}
	if len(img.Shape) != 3 {
		return nil, nil, fmt.Errorf("batch: images have shape %v, want [3, H, W]", img.Shape)
	}
	shape := []int{img.Count, img.Shape[0], img.Shape[1], img.Shape[2]}
	if windowed {
		mw, err := maskWindows(rec, tg.BoxesPerImage)
		if err != nil {
			return nil, nil, err
		}
		if ExpandsWindows(be) {
			x, err := d.stageWindowed(be, img.Data, shape, tg, mw)
			return x, &d.targets, err
		}
		if d.hostMasks, err = expandHost(d.hostMasks, mw); err != nil {
			return nil, nil, err
		}
		tg.Masks = d.hostMasks
	}
	if st, ok := be.(backend.Stager); ok {
		var parts [5][]byte
		parts, d.bpi = loss.StagedParts(tg, d.bpi)
		bufs, err := st.Stage(img.Data, parts[0], parts[1], parts[2], parts[3], parts[4])
		if err != nil {
			return nil, nil, fmt.Errorf("batch: %w", err)
		}
		d.staged = st
		x := tensor.WidenBytes(be, bufs[0], 1.0/255, shape...)
		d.targets.Adopt(be, [5]backend.Buffer(bufs[1:]), tg)
		return x, &d.targets, nil
	}
	x := tensor.UploadBytes(be, img.Data, 1.0/255, shape...)
	d.targets.Upload(be, tg)
	return x, &d.targets, nil
}

// stageWindowed stages a windowed batch on a backend that expands windows:
// the images, the four small target arrays, the window table and the
// window bytes, then the expansion into d.masks on the device.
func (d *deviceBatch) stageWindowed(be backend.Backend, images []byte, shape []int, tg *loss.Targets, mw batch.MaskWindows) (*tensor.Tensor, error) {
	wx, st := be.(backend.WindowExpander), be.(backend.Stager)
	var err error
	if d.table, err = wx.WindowTable(d.table[:0], mw.Windows, mw.Rows, mw.Cols, len(mw.Data)); err != nil {
		return nil, fmt.Errorf("batch: masks: %w", err)
	}
	var parts [5][]byte
	parts, d.bpi = loss.StagedParts(tg, d.bpi) // parts[4], the masks, is empty
	bufs, err := st.Stage(images, parts[0], parts[1], parts[2], parts[3], d.table, mw.Data)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	d.staged = st
	n, rows, cols := mw.Count(), mw.Rows, mw.Cols
	bytes := n * rows * cols
	if words := (bytes + 3) / 4; !d.masks.Present() || d.masks.Len < words {
		if d.masks.Present() {
			be.Free(d.masks)
		}
		d.masks = be.Alloc(max(words, 1))
	}
	if n > 0 {
		wx.ExpandWindows(n, rows, cols, bufs[5], bufs[6], d.masks)
	}
	x := tensor.WidenBytes(be, bufs[0], 1.0/255, shape...)
	d.targets.AdoptExpanded(be, [5]backend.Buffer{bufs[1], bufs[2], bufs[3], bufs[4], d.masks.Slice(0, (bytes+3)/4)}, tg, bytes)
	return x, nil
}

// done tells a staging backend that the work queued so far is the last
// to read the current batch, so that its slot is refilled two batches
// later as soon as that work has run, not after the host waits for the
// device.
func (d *deviceBatch) done() {
	if d.staged != nil {
		d.staged.StageDone()
		d.staged = nil
	}
}

// release returns a staging backend's slots (at the end of a pass over
// the training data, so that validation has the memory).
func (d *deviceBatch) release(be backend.Backend) {
	d.done()
	if st, ok := be.(backend.Stager); ok {
		st.FreeStaged()
	}
	if d.masks.Present() {
		be.Free(d.masks) // queued after the work that reads it
		d.masks = backend.Buffer{}
	}
}

// stageIdle is a staging backend's idle time between batches so far
// (backend.Stager.StageIdle), 0 on a backend that does not stage.
func stageIdle(be backend.Backend) time.Duration {
	if st, ok := be.(backend.Stager); ok {
		return st.StageIdle()
	}
	return 0
}

// deviceLoss is the loss's side of a step on the backend: the gradient
// tensors the loss kernel writes, which are the backward pass's seeds,
// and the small result buffer that is the step's one download.
type deviceLoss struct {
	seeds []*tensor.Tensor
	res   backend.Buffer
}

// lossResult is what comes down of a step's loss: the logged items and
// the total (checked for NaN and Inf).
type lossResult struct {
	Items [loss.NumComponents]float64
	Total float64
}

// stepLoss is the loss result of iteration ni: read at once from a
// backend that runs kernels as they are queued (cpu, emu), or on its way
// down from a backend.Fetcher (cuda) until read, so that the host queues
// the step's backward pass, its optimiser and the next step before it
// waits for the device.
type stepLoss struct {
	ni      int
	fetched backend.Fetched // nil: r is the result
	r       lossResult
}

// deferred reports whether the result is still on its way.
func (s *stepLoss) deferred() bool { return s.fetched != nil }

// read returns the result, waiting for its copy when it is on its way.
func (s *stepLoss) read() (lossResult, error) {
	if s.fetched != nil {
		var w [loss.ResultLen]float32
		err := s.fetched.Wait(w[:])
		s.fetched = nil
		if err != nil {
			return lossResult{}, fmt.Errorf("iteration %d: reading the loss: %w", s.ni, err)
		}
		s.r.Items, s.r.Total = loss.DecodeResult(w)
	}
	return s.r, nil
}

// run computes the loss of the model outputs outs (loss.NumOutputs of
// them, in its order) against tg on be, leaving d(total)/d(output) in
// d.seeds, and fetches the result (one download). It warns once when the
// backend has no loss kernel and the loss takes the host round trip.
func (d *deviceLoss) run(be backend.Backend, crit *loss.Criterion, g loss.Geometry, outs []*tensor.Tensor, tg *loss.DeviceTargets, warn func(string, ...any)) (stepLoss, error) {
	if len(outs) != loss.NumOutputs {
		return stepLoss{}, fmt.Errorf("loss: %d model outputs, want %d", len(outs), loss.NumOutputs)
	}
	if len(d.seeds) != len(outs) {
		d.seeds = make([]*tensor.Tensor, len(outs))
	}
	var ob, gb [loss.NumOutputs]backend.Buffer
	for i, o := range outs {
		if s := d.seeds[i]; s == nil || s.Backend() != be || !tensor.SameShape(s, o) {
			d.seeds[i] = tensor.ZerosOn(be, o.Shape...)
		}
		ob[i], gb[i] = o.Buffer(), d.seeds[i].Buffer()
	}
	if !d.res.Present() {
		d.res = be.Alloc(loss.ResultLen)
	}
	n := crit.HostRoundTrips()
	if err := crit.ForwardOn(be, g, ob, gb, tg, d.res); err != nil {
		return stepLoss{}, err
	}
	if n == 0 && crit.HostRoundTrips() > 0 && warn != nil {
		warn("the backend has no loss kernel: every step downloads the head outputs and targets and uploads their gradients",
			"backend", be.Name())
	}
	var s stepLoss
	if f, ok := be.(backend.Fetcher); ok {
		var err error
		if s.fetched, err = f.Fetch(d.res.Slice(0, loss.ResultLen)); err != nil {
			return stepLoss{}, fmt.Errorf("loss: %w", err)
		}
		return s, nil
	}
	s.r.Items, s.r.Total = loss.ReadResult(be, d.res)
	return s, nil
}

// drop waits for a loss still on its way and discards it (an epoch that
// ends in an error), so that its copy's resources are returned.
func (gs *gradSet) drop() {
	if gs.pending.deferred() {
		gs.pending.read()
	}
}
