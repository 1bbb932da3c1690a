package train

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/trainer/model"
)

const (
	metaState   = "train_state"
	prefixModel = "model/"
	prefixOptim = "optim/"
	prefixEMA   = "ema/"
	prefixGrad  = "grad/"
)

func defaultAug(imgsz int) augment.Config {
	a := augment.DefaultConfig()
	a.ImgSz = imgsz
	return a
}

// fitness is the reference's segmentation fitness: for boxes and masks,
// 0.1·mAP50 + 0.9·mAP50-95, summed (an undefined mAP counts as 0).
func fitness(ep Epoch) float64 {
	f := func(v float64) float64 { return max(v, 0) }
	return 0.1*f(ep.BoxMAP50) + 0.9*f(ep.BoxMAP) + 0.1*f(ep.MaskMAP50) + 0.9*f(ep.MaskMAP)
}

// save writes the run directory after an epoch: last (EMA weights), best
// when fitness improved, the resumable state, results.csv and the plot.
func (t *trainer) save(ep Epoch) error {
	if err := t.loadEMA(); err != nil {
		return err
	}
	meta := model.Meta{Imgsz: t.cfg.Imgsz, Step: int64(t.st.NI), Config: t.dir.meta}
	if err := t.em.SaveCheckpoint(t.dir.file(LastFile), meta); err != nil {
		return err
	}
	validated := ep.BoxMAP >= 0 || ep.MaskMAP >= 0
	if f := fitness(ep); validated && f >= t.st.Best {
		t.st.Best = f
		if err := t.dir.promoteBest(); err != nil {
			return err
		}
	}
	if err := t.saveState(); err != nil {
		return err
	}
	return t.dir.writeHistory(t.st.History)
}

// interrupt saves the run between two batches of an epoch (p is what the
// epoch has accumulated) and returns ErrInterrupted, wrapping cause when
// there is one.
func (t *trainer) interrupt(p *partialEpoch, ep *Epoch, elapsed func(), cause error) error {
	elapsed()
	p.Loss = ep.Loss
	t.st.Partial = p
	if err := t.saveState(); err != nil {
		return fmt.Errorf("saving the interrupted run: %w", err)
	}
	t.log.Info("run saved mid-epoch", "run", t.dir.path, "epoch", p.Epoch, "batches_done", p.Batches, "iteration", t.st.NI)
	if cause != nil {
		return fmt.Errorf("%w: %w", ErrInterrupted, cause)
	}
	return ErrInterrupted
}

// saveState writes state.safetensors: raw weights and BatchNorm counters,
// the EMA, optimiser buffers, gradients accumulated towards the next
// optimiser step, and the loop state.
func (t *trainer) saveState() error {
	t.st.LastStep = t.acc.Last()
	t.st.EMAUpdates = t.ema.Updates
	t.st.Categories = t.opt.Categories
	f, err := t.m.StateDict()
	if err != nil {
		return err
	}
	out := safetensors.New()
	for k, v := range f.Tensors {
		out.Tensors[prefixModel+k] = v
	}
	// The EMA is stored here as well as in last.safetensors so that the
	// state file alone is consistent if the process dies between writes.
	// Values, State and the pending gradients are the explicit crossings
	// of a save: the training state lives on the backend.
	ema := t.ema.Values()
	for i, p := range t.em.State() {
		ts, err := safetensors.FromFloat32(safetensors.F32, p.Shape, ema[i])
		if err != nil {
			return err
		}
		out.Tensors[prefixEMA+p.Name] = ts
	}
	for k, v := range t.opt_.State() {
		ts, err := safetensors.FromFloat32(safetensors.F32, []int{len(v)}, v)
		if err != nil {
			return err
		}
		out.Tensors[prefixOptim+k] = ts
	}
	// Gradients are pending whenever the accumulation to the nominal batch
	// straddles the save (an epoch end or an interruption); without them
	// the resumed step would miss those batches.
	if grads := t.host.gradsToHost(); grads != nil {
		for i, p := range t.params {
			ts, err := safetensors.FromFloat32(safetensors.F32, p.Shape, grads[i])
			if err != nil {
				return err
			}
			out.Tensors[prefixGrad+p.Name] = ts
		}
	}
	return t.dir.writeState(out, &t.st)
}

// load restores everything save wrote: raw weights and BatchNorm counters,
// optimiser buffers, EMA (from last.safetensors), schedule position,
// ProgLoss updates and the loader position.
func (t *trainer) load() error {
	f, err := t.dir.readState(&t.st)
	if err != nil {
		return err
	}
	mf := safetensors.New()
	ef := map[string][]float32{}
	ost := map[string][]float32{}
	grads := map[string][]float32{}
	for k, v := range f.Tensors {
		switch {
		case strings.HasPrefix(k, prefixModel):
			mf.Tensors[strings.TrimPrefix(k, prefixModel)] = v
		case strings.HasPrefix(k, prefixEMA):
			x, err := v.Float32s()
			if err != nil {
				return fmt.Errorf("resume: %s: %w", k, err)
			}
			ef[strings.TrimPrefix(k, prefixEMA)] = x
		case strings.HasPrefix(k, prefixOptim):
			x, err := v.Float32s()
			if err != nil {
				return fmt.Errorf("resume: %s: %w", k, err)
			}
			ost[strings.TrimPrefix(k, prefixOptim)] = x
		case strings.HasPrefix(k, prefixGrad):
			x, err := v.Float32s()
			if err != nil {
				return fmt.Errorf("resume: %s: %w", k, err)
			}
			grads[strings.TrimPrefix(k, prefixGrad)] = x
		default:
			return fmt.Errorf("resume: %s: unexpected tensor %s", StateFile, k)
		}
	}
	if err := t.m.LoadState(mf, model.LoadOptions{}); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if err := t.opt_.LoadState(ost); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	var vals [][]float32
	for _, p := range t.em.State() {
		x, ok := ef[p.Name]
		if !ok || len(x) != p.Value.Numel() {
			return fmt.Errorf("resume: %s: EMA tensor %s missing or mis-sized", StateFile, p.Name)
		}
		vals = append(vals, x)
	}
	if err := t.ema.Load(vals); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if len(grads) > 0 {
		var gs [][]float32
		for _, p := range t.params {
			g, ok := grads[p.Name]
			if !ok || len(g) != p.Gradient.Len {
				return fmt.Errorf("resume: %s: gradient %s missing or mis-sized", StateFile, p.Name)
			}
			gs = append(gs, g)
		}
		t.host.gradsFromHost(gs)
	}
	t.ema.Updates = t.st.EMAUpdates
	t.acc.Restore(t.st.LastStep)
	t.crit.SetUpdates(t.st.CritUpdates)
	t.log.Info("resuming", "run", t.dir.path, "epoch", t.st.NextEpoch+1, "iteration", t.st.NI,
		"loader_epoch", t.st.Loader.Epoch, "loader_consumed", t.st.Loader.Consumed)
	return nil
}

// CheckpointCategories returns the category table a training run stored
// in a checkpoint's config metadata (nil when there is none).
func CheckpointCategories(meta model.Meta) ([]shard.Category, error) {
	if len(meta.Config) == 0 {
		return nil, nil
	}
	var rm struct {
		Categories []shard.Category `json:"categories"`
	}
	if err := json.Unmarshal(meta.Config, &rm); err != nil {
		return nil, fmt.Errorf("checkpoint config: %w", err)
	}
	return rm.Categories, nil
}
