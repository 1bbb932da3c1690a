package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/train"
)

// maxMemoryFlag is --max-memory of every command that runs loaders (dump,
// bench, serve, train); memoryBudget reads it.
func maxMemoryFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "max-memory", Usage: "memory budget `SIZE` of the process: settings whose estimate is over it are refused, and the Go collector works to stay under it (default half the machine's or container's memory; \"none\" for no budget)"}
}

// memoryBudget returns the budget --max-memory sets, the default
// (pipeline.DefaultMaxMemory) when it is not given, or -1 for "none" or
// where the machine's memory is unknown. A budget also becomes the Go
// runtime's soft memory limit (debug.SetMemoryLimit) unless GOMEMLIMIT is
// set: the estimate covers what the process keeps live and the
// collector's usual headroom, and the limit makes the collector run
// earlier rather than let garbage carry the process past the budget.
func memoryBudget(c *ucli.Command) (int64, error) {
	var budget int64
	switch m := c.String("max-memory"); m {
	case "":
		budget = pipeline.DefaultMaxMemory()
	case "none":
		budget = -1
	default:
		n, err := bytesize.Parse(m)
		if err != nil || n < 1 {
			return 0, usagef("--max-memory %q: want a size such as 8GiB, or none", m)
		}
		budget = n
	}
	if budget <= 0 {
		return -1, nil
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(budget)
	}
	return budget, nil
}

// budgetCache is the decoded-image cache of a command without --cache (or
// with it left at its default) under budget: the default, but at most a
// quarter of the budget, so that in a small container the cache alone
// does not use up the budget.
func budgetCache(def, budget int64) int64 {
	if budget > 0 {
		return min(def, budget/4)
	}
	return def
}

// logEstimate logs a loader's memory estimate beside the budget.
func logEstimate(what string, m pipeline.Memory, budget int64) {
	slog.Info("memory estimate", "loader", what, "estimate_bytes", pipeline.Budget(m.Total()),
		"estimate", m.String(), "budget_bytes", budget)
}

// budgetedData is the training data of a local shard set whose loaders
// (training and validation, open together) share one memory budget: each
// Open is judged with the loaders already open.
type budgetedData struct {
	train.Data
	src    pipeline.Source
	what   string
	budget *loaderBudget
}

// loaderBudget is the memory budget of the loaders of one process and the
// live estimate of those open.
type loaderBudget struct {
	mu   sync.Mutex
	max  int64 // ≤ 0: none
	live int64 // the model's estimate and the loaders open
}

// sized is cfg with the cache a loader under this budget gets, and its
// estimate.
func (d budgetedData) sized(cfg pipeline.Config) (pipeline.Config, pipeline.Memory, error) {
	if cfg.CacheBytes == 0 && cfg.ImageCache == nil {
		// The training and the validation loader share the quarter of the
		// budget one loader's cache may take elsewhere.
		cfg.CacheBytes = budgetCache(pipeline.DefaultCacheBytes, d.budget.max) / 2
	}
	m, err := cfg.MemoryOf(d.src)
	return cfg, m, err
}

// checkRun refuses, before a run starts, a training loader (train on d)
// and the validation loader it opens each epoch beside it (val on v)
// that would not fit the budget beside what it already holds (the
// model's estimate), rather than after an epoch, at the first
// validation.
func checkRun(d budgetedData, train pipeline.Config, v budgetedData, val pipeline.Config) error {
	b := d.budget
	_, mt, err := d.sized(train)
	if err != nil {
		return err
	}
	_, mv, err := v.sized(val)
	if err != nil {
		return err
	}
	b.mu.Lock()
	held := b.live
	b.mu.Unlock()
	need := pipeline.Budget(held + mt.Total() + mv.Total())
	slog.Info("memory estimate", "run", "model and loaders", "estimate_bytes", need, "budget_bytes", b.max)
	if b.max > 0 && need > b.max {
		return fmt.Errorf("training needs an estimated %s: the model and what is open %s, the training loader %s, the validation loader %s (batch size %d at imgsz %d), over --max-memory %s: lower the batch size or imgsz (the model's share grows with both; the loaders' decoded-image caches take a quarter of the budget at most), or raise --max-memory: %w",
			bytesize.Format(need), bytesize.Format(held), mt, mv, train.BatchSize, train.Augment.ImgSz,
			bytesize.Format(b.max), pipeline.ErrMemoryLimit)
	}
	return nil
}

func (d budgetedData) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	cfg, m, err := d.sized(cfg)
	if err != nil {
		return nil, err
	}
	b := d.budget
	b.mu.Lock()
	live := b.live + m.Total()
	if b.max > 0 && pipeline.Budget(live) > b.max {
		open := b.live
		b.mu.Unlock()
		return nil, fmt.Errorf("%s loader: batch size %d at imgsz %d needs an estimated %s beside %s held by the model and the loaders open, over --max-memory %s: lower the batch size or imgsz (the model's share grows with both; the loaders' decoded-image caches take a quarter of the budget at most), or raise --max-memory: %w",
			d.what, cfg.BatchSize, cfg.Augment.ImgSz, m, bytesize.Format(open), bytesize.Format(b.max), pipeline.ErrMemoryLimit)
	}
	b.live = live
	b.mu.Unlock()
	logEstimate(d.what, m, b.max)
	cfg.MaxMemory = -1 // judged above, with the other loaders
	l, err := pipeline.New(ctx, d.src, cfg)
	if err != nil {
		b.release(m.Total())
		return nil, err
	}
	return &budgetedLoader{Loader: l, release: sync.OnceFunc(func() { b.release(m.Total()) })}, nil
}

func (b *loaderBudget) release(n int64) {
	b.mu.Lock()
	b.live -= n
	b.mu.Unlock()
}

// budgetedLoader gives its estimate back to the budget on Close.
type budgetedLoader struct {
	*pipeline.Loader
	release func()
}

func (l *budgetedLoader) Close() error {
	defer l.release()
	return l.Loader.Close()
}
