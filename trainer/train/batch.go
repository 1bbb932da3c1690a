package train

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/device"
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

// deviceBatch is the batch on the run's device. Its upload is the one
// crossing of a batch onto the device: the images as uint8 (widened on
// the backend) and the loss targets (boxes float32, classes and
// boxes_per_image int32, iscrowd and the mask stack as the loader's
// bytes), six parts whatever the batch, through the device's Stager: on
// cuda its double-buffered staging on a copy stream, beside the previous
// step; on cpu and emu UploadBytes into slots reused from batch to batch.
// The counts and bytes are the same either way.
//
// A windowed record (batch.IsWindowed: the `--remote` transport's masks
// as per-instance windows and their bytes, from remote's OpenWindowed)
// goes up windowed on a device that expands windows (Device.Windows:
// cuda): the window table (backend.WindowExpander's WindowTable, which
// checks the windows as the host expansion does) and the window bytes
// are staged in place of the dense stack — seven parts — and expanded on
// the device into a dense uint8 stack that the loss reads as it reads a
// staged one; that buffer is reused from batch to batch, grown when too
// small. On any other device the windows are expanded on the host
// (raster.Expand) and the batch goes up as a dense one, so every device
// trains on either form.
type deviceBatch struct {
	targets loss.DeviceTargets
	bpi     []int32
	// staged says the current batch went up and its Stager has yet to be
	// told that the step that reads it is queued (done).
	staged backend.Stager
	// table is the host window table of a windowed batch, masks the
	// device stack it expands into (Device.Windows); hostMasks the host
	// expansion's stack elsewhere.
	table     []byte
	masks     backend.Buffer
	hostMasks []byte
}

// ExpandsWindows reports whether training on d takes windowed batches
// windowed — the windows staged and expanded on the device — rather than
// expanded on the host (d.Windows: cuda). A data source that can deliver
// either form (remote's Client.OpenWindowed or Open) asks for it by this.
func ExpandsWindows(d *device.Device) bool { return d.Windows != nil }

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

// upload sends rec to d and returns the image tensor, [B, 3, H, W] in
// [0, 1], and the targets the loss reads there. Both are valid until the
// next-but-one upload; rec may be released as soon as upload returns.
// Call done once the step that reads them is queued.
func (d *deviceBatch) upload(dev *device.Device, rec arrow.RecordBatch) (*tensor.Tensor, *loss.DeviceTargets, error) {
	be := dev.Backend
	windowed := batch.IsWindowed(rec.Schema())
	var tg *loss.Targets
	var err error
	if windowed {
		tg, err = batch.InstancesWithoutMasks(rec)
	} else {
		tg, err = batch.InstancesOf(rec)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("loss: %w", err)
	}
	img, err := batch.ImageTensor(rec)
	if err != nil {
		return nil, nil, err
	}
	if len(img.Shape) != 3 {
		return nil, nil, fmt.Errorf("batch: images have shape %v, want [3, H, W]", img.Shape)
	}
	shape := []int{img.Count, img.Shape[0], img.Shape[1], img.Shape[2]}
	var parts [5][]byte
	var mw batch.MaskWindows
	onDevice := windowed && dev.Windows != nil
	if windowed {
		if mw, err = maskWindows(rec, tg.BoxesPerImage); err != nil {
			return nil, nil, err
		}
		if onDevice {
			if d.table, err = dev.Windows.WindowTable(d.table[:0], mw.Windows, mw.Rows, mw.Cols, len(mw.Data)); err != nil {
				return nil, nil, fmt.Errorf("batch: masks: %w", err)
			}
		} else {
			if d.hostMasks, err = expandHost(d.hostMasks, mw); err != nil {
				return nil, nil, err
			}
			tg.Masks = d.hostMasks
		}
	}
	parts, d.bpi = loss.StagedParts(tg, d.bpi) // on the device's windows, parts[4] is empty
	up := [][]byte{img.Data, parts[0], parts[1], parts[2], parts[3], parts[4]}
	if onDevice {
		up = append(up[:5], d.table, mw.Data)
	}
	bufs, err := dev.Stager.Stage(up...)
	if err != nil {
		return nil, nil, fmt.Errorf("batch: %w", err)
	}
	d.staged = dev.Stager
	x := tensor.WidenBytes(be, bufs[0], 1.0/255, shape...)
	if !onDevice {
		d.targets.Adopt(be, [5]backend.Buffer(bufs[1:]), tg)
		return x, &d.targets, nil
	}
	n, rows, cols := mw.Count(), mw.Rows, mw.Cols
	bytes := n * rows * cols
	if words := (bytes + 3) / 4; !d.masks.Present() || d.masks.Len < words {
		if d.masks.Present() {
			be.Free(d.masks)
		}
		d.masks = be.Alloc(max(words, 1))
	}
	if n > 0 {
		dev.Windows.ExpandWindows(n, rows, cols, bufs[5], bufs[6], d.masks)
	}
	d.targets.AdoptExpanded(be, [5]backend.Buffer{bufs[1], bufs[2], bufs[3], bufs[4], d.masks.Slice(0, (bytes+3)/4)}, tg, bytes)
	return x, &d.targets, nil
}

// done tells the device's Stager that the work queued so far is the last
// to read the current batch, so that its slot is refilled two batches
// later as soon as that work has run, not after the host waits for the
// device.
func (d *deviceBatch) done() {
	if d.staged != nil {
		d.staged.StageDone()
		d.staged = nil
	}
}

// release returns the Stager's slots (at the end of a pass over the
// training data, so that validation has the memory).
func (d *deviceBatch) release(dev *device.Device) {
	d.done()
	dev.Stager.FreeStaged()
	if d.masks.Present() {
		dev.Backend.Free(d.masks) // queued after the work that reads it
		d.masks = backend.Buffer{}
	}
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

// stepLoss is the loss result of iteration ni: read at once on a device
// that runs kernels as they are queued (cpu, emu), or on its way down
// through the device's Fetcher (cuda) until read, so that the host queues
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
// them, in its order) against tg on dev, leaving d(total)/d(output) in
// d.seeds, and fetches the result (one download). It warns once when the
// device has no loss kernel and the loss takes the host round trip.
func (d *deviceLoss) run(dev *device.Device, crit *loss.Criterion, g loss.Geometry, outs []*tensor.Tensor, tg *loss.DeviceTargets, warn func(string, ...any)) (stepLoss, error) {
	if len(outs) != loss.NumOutputs {
		return stepLoss{}, fmt.Errorf("loss: %d model outputs, want %d", len(outs), loss.NumOutputs)
	}
	if len(d.seeds) != len(outs) {
		d.seeds = make([]*tensor.Tensor, len(outs))
	}
	be := dev.Backend
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
	if err := crit.ForwardOn(dev.Loss, g, ob, gb, tg, d.res); err != nil {
		return stepLoss{}, err
	}
	if n == 0 && crit.HostRoundTrips() > 0 && warn != nil {
		warn("the backend has no loss kernel: every step downloads the head outputs and targets and uploads their gradients",
			"backend", be.Name())
	}
	var s stepLoss
	if f := dev.Fetcher; f != nil {
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
