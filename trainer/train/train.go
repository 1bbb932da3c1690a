package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Progress shows one epoch's progress (a terminal bar or periodic logs).
type Progress interface {
	Add(images int)
	Finish()
}

// Options configure Run.
type Options struct {
	Config Config
	// Train is the training data; Val the validation data (nil: validate
	// on Train, letterboxed without augmentation). Local wraps shards on
	// this machine.
	Train, Val Data
	// Categories is the dataset's category table (class index order); it
	// goes into config metadata so predictions carry dataset category ids.
	Categories []shard.Category
	// Out is the run directory.
	Out string
	// Resume continues the run in Out from its last completed epoch.
	Resume bool
	// StopAfter ends this call after that many epochs (0: run to
	// Config.Epochs); the run stays resumable. Used to split a run.
	StopAfter int
	// StopAfterIterations ends this call after that many iterations of
	// this call, saving the resumable state mid-epoch (0: no limit). It
	// splits a run at a batch, as an interruption does.
	StopAfterIterations int
	// Device, on Resume, continues the run on another device ("cpu",
	// "emu" or "cuda") than the one it ran on; config.json is updated so
	// later resumes stay there. Checkpoints and state have one format on
	// every backend. Empty keeps the run's device.
	Device string
	// Backend, when set, is the opened device to train on instead of
	// opening the one the config names, which must be its kind
	// (Backend.Name()): for a caller that holds a device already
	// (Resolve's, or a test's device.Host of a wrapper). The run does not
	// close it.
	Backend *device.Device
	// NewProgress starts an epoch's progress display (nil: none).
	NewProgress func(what string, total int) Progress
	Logger      *slog.Logger
}

// Epoch is one row of results.csv.
type Epoch struct {
	Epoch int `json:"epoch"`
	// Loss is the mean over the epoch's batches of the one-to-one items
	// (box, seg, cls, dfl, semseg), as the reference logs them.
	Loss [loss.NumComponents]float64 `json:"loss"`
	// Box and mask mAP50 and mAP50-95 of the EMA model (-1: not validated).
	// The keys of these and of TrainSec/ValSec are the names the state
	// files of earlier runs already hold, so that those runs still resume.
	BoxMAP50     float64 `json:"BoxMAP50"`
	BoxMAP       float64 `json:"BoxMAP"`
	MaskMAP50    float64 `json:"MaskMAP50"`
	MaskMAP      float64 `json:"MaskMAP"`
	LR           float64 `json:"lr"`
	O2M          float64 `json:"o2m"`
	ImagesPerSec float64 `json:"images_per_s"`
	StallSec     float64 `json:"loader_stall_s"`
	TrainSec     float64 `json:"TrainSec"`
	ValSec       float64 `json:"ValSec"`
}

// ErrInterrupted is returned (wrapping the context's error) when a run was
// cancelled or split at a batch: the state is saved and the run resumes
// from the next batch.
var ErrInterrupted = errors.New("train: interrupted; the run resumes from the next batch")

// Summary is what Run reports.
type Summary struct {
	Epochs []Epoch
	Wall   time.Duration
	// Skips counts the training samples this call's loader skipped (damaged
	// rows, unreadable images), by reason; nil when the batches came from a
	// loader that does not count them here (a remote server counts its own).
	// It is also written to RUN_DIR/skipped.json.
	Skips *pipeline.SkipSummary
}

type trainer struct {
	opt    Options
	cfg    Config
	log    *slog.Logger
	m, em  *model.Model
	dev    *device.Device
	be     backend.Backend // dev.Backend
	host   *hostState
	params []*optim.Param
	state  []backend.Buffer // the model's state tensors, which the EMA averages
	opt_   optim.Optimizer
	sched  optim.Schedule
	acc    optim.Accumulator
	ema    *optim.EMA
	crit   *loss.Criterion
	nb, n  int
	st     state
	dir    *runDir
	iters  int // iterations run by this call
	// crossed is the host↔device traffic of the last epoch's training
	// iterations (not its validation), and crossedIters their number.
	crossed      backend.Transfers
	crossedIters int
	// waited is the device's idle time between those iterations' batches
	// on a staging backend (backend.Stager.StageIdle; 0 elsewhere).
	waited time.Duration
}

// Run trains as opt describes, writing the run directory after every
// epoch (config.json, results.csv, results.png, last/best/state
// safetensors). Cancelling ctx stops at the next batch; the last
// completed epoch stays resumable.
func Run(ctx context.Context, opt Options) (*Summary, error) {
	t0 := time.Now()
	t := &trainer{opt: opt, log: opt.Logger}
	if t.log == nil {
		t.log = slog.Default()
	}
	if err := t.setup(); err != nil {
		return nil, err
	}
	end := t.cfg.Epochs
	if opt.StopAfter > 0 {
		end = min(end, t.st.NextEpoch+opt.StopAfter)
	}
	sum := &Summary{}
	if t.st.NextEpoch >= end {
		sum.Epochs = t.st.History
		return sum, nil
	}
	lc := t.cfg.TrainLoader(t.st.Loader)
	lc.Logger = t.log
	ld, err := opt.Train.Open(ctx, lc)
	if err != nil {
		return nil, err
	}
	defer ld.Close()
	defer t.recordSkips(ld, sum)
	for e := t.st.NextEpoch; e < end; e++ {
		ep, err := t.epoch(ctx, ld, e)
		if errors.Is(err, ErrInterrupted) {
			sum.Epochs = t.st.History
			sum.Wall = time.Since(t0)
			return sum, err
		}
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", e+1, err)
		}
		t.st.History = append(t.st.History, ep)
		if err := t.save(ep); err != nil {
			return nil, err
		}
		t.log.Info("epoch", "epoch", e+1, "epochs", t.cfg.Epochs,
			"box_loss", r4(ep.Loss[0]), "seg_loss", r4(ep.Loss[1]), "cls_loss", r4(ep.Loss[2]), "dfl_loss", r4(ep.Loss[3]), "sem_loss", r4(ep.Loss[4]),
			"box_map50", r4(ep.BoxMAP50), "box_map", r4(ep.BoxMAP), "mask_map50", r4(ep.MaskMAP50), "mask_map", r4(ep.MaskMAP),
			"lr", ep.LR, "images_per_s", r4(ep.ImagesPerSec), "loader_stall_s", r4(ep.StallSec), "train_s", r4(ep.TrainSec), "val_s", r4(ep.ValSec))
		if n := t.crossedIters; n > 0 && t.be.Name() != "cpu" {
			// On a device, what each training iteration moved across the
			// host boundary: the batch up and the loss items down, plus
			// whatever a backend without a fused kernel round-trips.
			x := t.crossed
			args := []any{"device", t.be.Name(),
				"uploads", x.Uploads / int64(n), "upload_bytes", x.UploadBytes / int64(n),
				"downloads", x.Downloads / int64(n), "download_bytes", x.DownloadBytes / int64(n)}
			if t.dev.Fetcher != nil {
				// A device running beside the host: its own wait for
				// data, its idle time between one batch's step and the
				// next's, copies included.
				args = append(args, "device_wait_ms", r4(t.waited.Seconds()*1e3/float64(n)))
			}
			t.log.Info("device traffic per iteration", args...)
		}
	}
	sum.Epochs = t.st.History
	sum.Wall = time.Since(t0)
	return sum, nil
}

func r4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// recordSkips puts the loader's skip summary into sum and the run
// directory, on every way out of the training loop, so that damaged data is
// reported where a user looks after the run.
func (t *trainer) recordSkips(ld pipeline.Batches, sum *Summary) {
	s, ok := pipeline.SkipsOf(ld)
	if !ok {
		return
	}
	sum.Skips = &s
	if n := s.Total(); n > 0 {
		t.log.Warn("training samples skipped", "skipped", n, "summary", s.String())
	}
	if err := s.WriteFile(t.dir.path); err != nil {
		t.log.Error("writing the skip summary", "run", t.dir.path, "err", err)
	}
}

func (t *trainer) setup() error {
	opt := t.opt
	if opt.Train == nil {
		return errors.New("train: no training data")
	}
	d, err := openRunDir(opt)
	if err != nil {
		return err
	}
	t.dir, t.cfg, t.opt.Categories = d, d.cfg, d.cats
	t.n = opt.Train.Images()
	if t.n == 0 {
		return errors.New("train: the training data has no images")
	}
	t.nb = (t.n + t.cfg.Batch - 1) / t.cfg.Batch
	mcfg := model.Config{Variant: t.cfg.Variant, Classes: t.cfg.Classes, Seed: t.cfg.Seed}
	if t.m, err = model.New(mcfg); err != nil {
		return err
	}
	if t.em, err = model.New(mcfg); err != nil {
		return err
	}
	if t.dev == nil { // tests bring their own wrappers of a device
		t.dev = opt.Backend
	}
	if t.dev == nil {
		if t.dev, err = device.OpenPrecision(t.cfg.Device, t.cfg.Precision); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	t.be = t.dev.Backend
	t.m.To(t.be)
	t.em.To(t.be)
	if t.cfg.Weights != "" && !opt.Resume {
		if _, err := t.m.LoadCheckpoint(t.cfg.Weights); err != nil {
			return fmt.Errorf("train: initial weights: %w", err)
		}
	}
	t.host = newHostState(t.m)
	// The optimiser, clipping and the EMA work on the model's own buffers
	// on the backend; the EMA's average is the evaluation model's state.
	norm := map[string]bool{}
	for _, bn := range t.m.BatchNorms() {
		norm[bn.Prefix+".weight"] = true
	}
	for _, p := range t.m.Params() {
		t.params = append(t.params, &optim.Param{Name: p.Name, Shape: p.Shape, Backend: t.be, Kernels: t.dev.Optim,
			Value: p.Value.Buffer(), Gradient: p.Value.GradBuffer(), Norm: norm[p.Name]})
	}
	var avg []backend.Buffer
	for _, p := range t.m.State() {
		t.state = append(t.state, p.Value.Buffer())
	}
	for _, p := range t.em.State() {
		avg = append(avg, p.Value.Buffer())
	}
	if err := t.buildOptimizer(); err != nil {
		return err
	}
	if t.ema, err = optim.NewEMAOn(t.be, t.dev.Optim, avg, t.state); err != nil {
		return err
	}
	t.ema.Tau = t.cfg.EMATau
	lc := loss.DefaultConfig(t.cfg.Epochs)
	if t.crit, err = loss.NewCriterion(lc); err != nil {
		return err
	}
	t.st = state{Loader: order.State{Seed: t.cfg.Seed}, Best: -1}
	if err := t.dir.mkdir(); err != nil {
		return err
	}
	if opt.Resume {
		if err := t.dir.moved(); err != nil {
			return err
		}
		if t.dir.from != "" {
			t.log.Info("resuming on another device", "from", t.dir.from, "to", t.cfg.Device)
		}
		return t.load()
	}
	return t.dir.create()
}

func (t *trainer) buildOptimizer() error {
	c := t.cfg
	lr, mom := c.LR0, c.Momentum
	muonW, sgdW := 0.5, 0.5
	t.sched = optim.DefaultSchedule(c.Epochs, t.nb, c.Batch)
	t.sched.NBS, t.sched.LRF, t.sched.WarmupEpochs = c.NBS, c.LRF, c.WarmupEpochs
	t.sched.WarmupMomentum, t.sched.Momentum, t.sched.WarmupBiasLR = c.WarmupMomentum, c.Momentum, c.WarmupBiasLR
	if c.Optimizer == "auto" {
		a, err := optim.Auto(t.n, c.Batch, c.NBS, c.Epochs, c.Classes)
		if err != nil {
			return err
		}
		lr, mom, muonW, sgdW = a.LR, a.Momentum, a.MuonWeight, a.SGDWeight
		t.sched.WarmupBiasLR = a.WarmupBiasLR
	}
	muon := c.Optimizer == "auto" || c.Optimizer == "musgd"
	groups, err := optim.BuildGroups(t.params, optim.GroupConfig{LR: lr, Momentum: mom,
		WeightDecay: optim.ScaledWeightDecay(c.WeightDecay, c.Batch, c.NBS), Muon: muon})
	if err != nil {
		return err
	}
	switch c.Optimizer {
	case "auto", "musgd":
		t.opt_ = optim.NewMuSGD(groups, muonW, sgdW)
	case "sgd":
		t.opt_ = optim.NewSGD(groups)
	case "adamw":
		t.opt_ = optim.NewAdamW(groups, mom)
	}
	return nil
}

// lr is the learning rate of the last (plain, decayed) group, the one most
// parameters are in.
func (t *trainer) lr() float64 {
	g := t.opt_.Groups()
	return g[len(g)-1].LR
}

// epoch trains epoch e (0-based) from the batches of ld, continuing a
// partial epoch the saved state holds. Loader stall is the time spent
// waiting in Next, whatever the transport.
func (t *trainer) epoch(ctx context.Context, ld pipeline.Batches, e int) (Epoch, error) {
	ep := Epoch{Epoch: e + 1, BoxMAP50: -1, BoxMAP: -1, MaskMAP50: -1, MaskMAP: -1}
	ep.O2M, _ = t.crit.Weights()
	p := partialEpoch{Epoch: e + 1}
	if t.st.Partial != nil && t.st.Partial.Epoch == e+1 {
		p = *t.st.Partial
	}
	t.st.Partial = nil
	ep.Loss = p.Loss
	var prog Progress
	if t.opt.NewProgress != nil {
		prog = t.opt.NewProgress(fmt.Sprintf("epoch %d/%d", e+1, t.cfg.Epochs), t.n)
		if prog != nil && p.Images > 0 {
			prog.Add(p.Images)
		}
	}
	t0 := time.Now()
	var stall time.Duration
	elapsed := func() { // folds this call's time into p
		p.TrainSec += time.Since(t0).Seconds()
		p.StallSec += stall.Seconds()
		t0, stall = time.Now(), 0
	}
	tp := tensor.NewTape(t.be)
	var gs gradSet
	defer gs.batch.release(t.dev)
	defer gs.drop()
	// stop saves the partial epoch once the latest loss is in it.
	stop := func(cause error) error {
		if err := t.settle(&gs, &ep); err != nil {
			return err
		}
		return t.interrupt(&p, &ep, elapsed, cause)
	}
	x0, i0, w0 := t.be.Transfers(), t.iters, t.dev.Stager.StageIdle()
	for {
		if err := ctx.Err(); err != nil {
			return ep, stop(err)
		}
		if t.opt.StopAfterIterations > 0 && t.iters >= t.opt.StopAfterIterations {
			return ep, stop(nil)
		}
		w0 := time.Now()
		rec, err := ld.Next(ctx)
		stall += time.Since(w0)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return ep, stop(ctx.Err())
			}
			return ep, err
		}
		k, err := t.step(tp, rec, e, &gs, &ep)
		rec.Release()
		if err != nil {
			return ep, err
		}
		p.Images += k
		p.Batches++
		t.st.NI++
		t.iters++
		t.st.Loader = ld.State()
		if prog != nil {
			prog.Add(k)
		}
		if t.st.Loader.Epoch > e {
			break
		}
		if t.cfg.SaveEvery > 0 && t.st.NI%t.cfg.SaveEvery == 0 {
			if err := t.settle(&gs, &ep); err != nil {
				return ep, err
			}
			elapsed()
			saved := p
			saved.Loss = ep.Loss
			t.st.Partial = &saved
			err := t.saveState()
			t.st.Partial = nil
			if err != nil {
				return ep, fmt.Errorf("saving the state at iteration %d: %w", t.st.NI, err)
			}
		}
	}
	if err := t.settle(&gs, &ep); err != nil {
		return ep, err
	}
	t.crossed, t.crossedIters = x0.Since(t.be.Transfers()), t.iters-i0
	gs.batch.release(t.dev) // validation may want the staging memory
	t.waited = t.dev.Stager.StageIdle() - w0
	if prog != nil {
		prog.Finish()
	}
	if p.Batches == 0 {
		return ep, errors.New("the loader returned no batch")
	}
	elapsed()
	for i := range ep.Loss {
		ep.Loss[i] /= float64(p.Batches)
	}
	ep.TrainSec = p.TrainSec
	ep.ImagesPerSec = float64(p.Images) / ep.TrainSec
	ep.StallSec = p.StallSec
	ep.LR = t.lr()
	t.crit.Update()
	t.st.CritUpdates++
	t.st.NextEpoch = e + 1
	if t.cfg.ValEvery == 0 || (e+1)%t.cfg.ValEvery == 0 || e+1 == t.cfg.Epochs {
		v0 := time.Now()
		box, mask, err := t.validate(ctx)
		if err != nil {
			return ep, fmt.Errorf("validation: %w", err)
		}
		ep.ValSec = time.Since(v0).Seconds()
		if box != nil {
			ep.BoxMAP, ep.BoxMAP50 = box.Stats[0], box.Stats[1]
		}
		if mask != nil {
			ep.MaskMAP, ep.MaskMAP50 = mask.Stats[0], mask.Stats[1]
		}
	}
	return ep, nil
}

// step trains on one batch and returns its image count.
func (t *trainer) step(tp *tensor.Tape, r arrow.RecordBatch, e int, gs *gradSet, ep *Epoch) (int, error) {
	// The one upload of the batch: images as uint8, widened on the
	// backend, and the loss targets.
	x, tg, err := gs.batch.upload(t.dev, r)
	if err != nil {
		return 0, err
	}
	// Once the step's kernels are queued, a staging backend may refill
	// this batch's slot as soon as they have run: the next batch's copies
	// run on the device beside this step's backward pass and optimiser.
	defer gs.batch.done()
	B := x.Shape[0]
	acc := t.sched.Apply(t.opt_.Groups(), e, t.st.NI)
	mo, err := t.m.Forward(tp, x, model.Train)
	if err != nil {
		return 0, err
	}
	outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
		mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
	// The loss runs on the backend as one fused kernel; its gradients
	// are the backward seeds and only its items and total come down.
	sl, err := gs.loss.run(t.dev, t.crit, geometry(mo, t.cfg.Classes), outs, tg, t.log.Warn)
	if err != nil {
		tp.Reset()
		return 0, err
	}
	sl.ni = t.st.NI
	if !sl.deferred() {
		// Read at once (the kernels have run): a non-finite loss is
		// refused before the backward pass.
		if err := t.account(&sl, ep); err != nil {
			tp.Reset()
			return 0, err
		}
	}
	seeds := gs.loss.seeds
	// Nothing reads this step's activations after backward: handing them
	// back lets the next step reuse their memory instead of faulting in
	// gigabytes of fresh pages every iteration.
	tp.RecycleOutputs()
	if err := tp.BackwardFrom(outs, seeds); err != nil {
		return 0, err
	}
	if t.acc.Due(t.st.NI, acc) {
		// Clip, step, zero and average are kernels on the backend's own
		// buffers: an optimiser iteration crosses nothing more than an
		// accumulation iteration.
		optim.ClipGrads(t.params, t.cfg.ClipNorm)
		t.opt_.Step()
		optim.ZeroGrad(t.params)
		if err := t.ema.UpdateOn(t.state); err != nil {
			return 0, err
		}
	}
	if sl.deferred() {
		// The whole step is queued: now read the previous step's loss,
		// whose copy has long run, while the device works on this one.
		// A non-finite loss is then refused one step later than on a
		// backend that runs kernels as they are queued, but before
		// anything is saved (settle runs before every save).
		prev := gs.pending
		gs.pending = sl
		if prev.deferred() {
			if err := t.account(&prev, ep); err != nil {
				return 0, err
			}
		}
	}
	return B, nil
}

// account adds a step's loss items to the epoch's sums, refusing a
// non-finite total.
func (t *trainer) account(s *stepLoss, ep *Epoch) error {
	r, err := s.read()
	if err != nil {
		return err
	}
	if math.IsNaN(r.Total) || math.IsInf(r.Total, 0) {
		return fmt.Errorf("iteration %d: loss is %v", s.ni, r.Total)
	}
	for i, v := range r.Items {
		ep.Loss[i] += v
	}
	return nil
}

// settle accounts the loss still on its way, if any: before the epoch's
// sums are read or saved.
func (t *trainer) settle(gs *gradSet, ep *Epoch) error {
	if !gs.pending.deferred() {
		return nil
	}
	s := gs.pending
	gs.pending = stepLoss{}
	return t.account(&s, ep)
}

func geometry(mo *model.Output, nc int) loss.Geometry {
	g := loss.Geometry{B: mo.Proto.Shape[0], NC: nc, NM: mo.Proto.Shape[1],
		ProtoH: mo.Proto.Shape[2], ProtoW: mo.Proto.Shape[3], SemH: mo.Semseg.Shape[2], SemW: mo.Semseg.Shape[3]}
	for i, f := range mo.Feats {
		g.Levels = append(g.Levels, loss.Level{H: f.Shape[2], W: f.Shape[3], Stride: float32(model.Strides[i])})
	}
	return g
}
