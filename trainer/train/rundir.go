package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/atomicfile"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/loss"
)

// Files of a run directory.
const (
	ConfigFile  = "config.json"
	LastFile    = "last.safetensors"
	BestFile    = "best.safetensors"
	StateFile   = "state.safetensors"
	ResultsFile = "results.csv"
	PlotFile    = "results.png"
)

// runMeta is the JSON stored as config in checkpoints and config.json.
type runMeta struct {
	Config
	Categories []shard.Category `json:"categories"`
}

// state is what resume needs beyond the tensors.
type state struct {
	NextEpoch   int              `json:"next_epoch"`
	NI          int              `json:"ni"`
	LastStep    int              `json:"last_step"`
	EMAUpdates  int              `json:"ema_updates"`
	CritUpdates int              `json:"crit_updates"`
	Loader      order.State      `json:"loader"`
	Best        float64          `json:"best_fitness"`
	History     []Epoch          `json:"history"`
	Categories  []shard.Category `json:"Categories"` // the key earlier runs hold
	// Partial is the epoch in progress when the state was saved between
	// two of its batches (nil at an epoch end).
	Partial *partialEpoch `json:"partial,omitempty"`
}

// partialEpoch is what an epoch has accumulated so far: resuming adds to
// it, so the epoch's results.csv row equals an uninterrupted epoch's.
type partialEpoch struct {
	Epoch    int                         `json:"epoch"` // 1-based
	Loss     [loss.NumComponents]float64 `json:"loss"`
	Images   int                         `json:"images"`
	Batches  int                         `json:"batches"`
	TrainSec float64                     `json:"train_s"`
	StallSec float64                     `json:"stall_s"`
}

// runDir is one run directory: the run's config (config.json, read and
// parsed here once), its resumable state file and the files rewritten
// after every epoch, each written whole or not at all (internal/atomicfile)
// so that an interruption never leaves a torn file behind.
type runDir struct {
	path string
	cfg  Config
	cats []shard.Category
	// from is the device a resumed run ran on when Options.Device moves
	// it (empty otherwise).
	from string
	// meta is the run's config as compact JSON, stored as "config" in the
	// metadata of every checkpoint and state file.
	meta []byte
}

// openRunDir settles the run's config: a fresh run takes opt.Config and
// opt.Categories, a resumed one the config.json in opt.Out. The class
// count defaults to the category table's and the result is validated.
// Nothing is written yet (see create).
func openRunDir(opt Options) (*runDir, error) {
	if opt.Out == "" {
		return nil, errors.New("train: no run directory")
	}
	d := &runDir{path: opt.Out, cfg: opt.Config, cats: opt.Categories}
	if opt.Resume {
		rm, err := readRunMeta(opt.Out)
		if err != nil {
			return nil, err
		}
		d.cfg, d.cats = rm.Config, rm.Categories
		if opt.Device != "" && opt.Device != d.cfg.Device {
			d.from, d.cfg.Device = d.cfg.Device, opt.Device
		}
	} else if opt.Device != "" {
		return nil, errors.New("train: Options.Device moves a resumed run; a fresh run takes Config.Device")
	}
	if d.cfg.Classes == 0 {
		d.cfg.Classes = len(d.cats)
	}
	if opt.Backend != nil {
		// The caller's device stands in for opening the one the config
		// names, which must be of its kind: config.json stays true, and a
		// resume without Backend opens that device.
		if err := d.cfg.validateSettings(); err != nil {
			return nil, err
		}
		if d.cfg.Device != opt.Backend.Name() {
			return nil, fmt.Errorf("train: the config's device is %q, the given backend %q", d.cfg.Device, opt.Backend.Name())
		}
	} else if err := d.cfg.Validate(); err != nil {
		return nil, err
	}
	if d.cfg.Classes < 1 {
		return nil, errors.New("train: class count unknown: the shards have no categories and the config sets none")
	}
	if d.cats != nil && len(d.cats) != d.cfg.Classes {
		return nil, fmt.Errorf("train: config has %d classes, the category table %d", d.cfg.Classes, len(d.cats))
	}
	meta, err := json.Marshal(runMeta{Config: d.cfg, Categories: d.cats})
	if err != nil {
		return nil, err
	}
	d.meta = meta
	return d, nil
}

// ReadRunConfig returns the config a run directory holds (its
// config.json), as --resume continues it: the data it was trained on
// (Shards, ValShards, Remote) included.
func ReadRunConfig(dir string) (Config, error) {
	rm, err := readRunMeta(dir)
	return rm.Config, err
}

// readRunMeta reads and parses dir's config.json: the one reader of it.
func readRunMeta(dir string) (runMeta, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return runMeta{}, fmt.Errorf("resume: %w", err)
	}
	rm := runMeta{Config: DefaultConfig()}
	if err := json.Unmarshal(b, &rm); err != nil {
		return runMeta{}, fmt.Errorf("resume: %s: %w", path, err)
	}
	return rm, nil
}

// file is the path of a run file.
func (d *runDir) file(name string) string { return filepath.Join(d.path, name) }

// mkdir makes the directory (resuming one that exists is fine).
func (d *runDir) mkdir() error { return os.MkdirAll(d.path, 0o755) }

// create starts a fresh run: it refuses a directory that already holds
// one and writes config.json.
func (d *runDir) create() error {
	if _, err := os.Stat(d.file(StateFile)); err == nil {
		return fmt.Errorf("train: %s already holds a run; use --resume %s or another --out", d.path, d.path)
	}
	return d.writeConfig()
}

// writeConfig writes config.json, whole or not at all.
func (d *runDir) writeConfig() error {
	pretty, err := json.MarshalIndent(runMeta{Config: d.cfg, Categories: d.cats}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(d.file(ConfigFile), append(pretty, '\n'), 0o644)
}

// moved rewrites config.json with the device a resumed run moves to.
func (d *runDir) moved() error {
	if d.from == "" {
		return nil
	}
	return d.writeConfig()
}

// writeState replaces state.safetensors with f, whose metadata gets the
// loop state st and the run's config.
func (d *runDir) writeState(f *safetensors.File, st *state) error {
	sj, err := json.Marshal(st)
	if err != nil {
		return err
	}
	f.Metadata = map[string]string{metaState: string(sj), "config": string(d.meta)}
	return safetensors.WriteFile(d.file(StateFile), f)
}

// readState reads state.safetensors and its loop state into st.
func (d *runDir) readState(st *state) (*safetensors.File, error) {
	f, err := safetensors.ReadFile(d.file(StateFile))
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	if err := json.Unmarshal([]byte(f.Metadata[metaState]), st); err != nil {
		return nil, fmt.Errorf("resume: %s: %w", StateFile, err)
	}
	return f, nil
}

// promoteBest copies last.safetensors to best.safetensors.
func (d *runDir) promoteBest() error {
	b, err := os.ReadFile(d.file(LastFile))
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(d.file(BestFile), b, 0o644)
}

// writeHistory rewrites results.csv and results.png from the epochs so far.
func (d *runDir) writeHistory(hist []Epoch) error {
	if err := writeResults(d.file(ResultsFile), hist); err != nil {
		return err
	}
	return writePlot(d.file(PlotFile), hist)
}
