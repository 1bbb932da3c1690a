package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Config configures a Loader. Zero values take the documented defaults,
// except Augment: start from augment.DefaultConfig() (New does when
// Augment.ImgSz is 0).
type Config struct {
	BatchSize int // images per batch (per rank), default 32
	Workers   int // sample-building goroutines, default GOMAXPROCS
	Prefetch  int // batches built ahead of the consumer, default 2·Workers capped to 8, at least 2

	// Start is where the run begins: seed, epoch and global samples of
	// that epoch already consumed (0 for a fresh run).
	Start order.State
	// Epochs is the schedule's total epoch count: the loader stops after
	// epoch Epochs-1 and close_mosaic counts back from it. Default
	// Start.Epoch+1 (one epoch).
	Epochs int
	// CloseMosaic disables mosaic in the last CloseMosaic epochs.
	CloseMosaic int

	Rank, WorldSize int // this rank and the world size, default 0 of 1

	Val bool // validation: letterbox only, no randomness

	// Classes, when not empty, keeps only the instances whose class is
	// one of these (Ultralytics' classes): the others are left out of
	// every sample, uncounted, before augmentation, under their own
	// class indices (no renumbering). An image left with no instance is
	// still delivered, as a background image, as Ultralytics keeps it.
	// At most MaxKeepClasses entries, each at least 0.
	Classes []int32
	// SingleClass gives every instance kept class 0 (Ultralytics'
	// single_cls), after Classes has chosen them. An instance whose class
	// lies past the set's categories is then kept as class 0, as
	// Ultralytics keeps it under single_cls (without it, such an instance
	// is damage: left out and counted, SkipBadClass).
	SingleClass bool
	// Fraction in (0, 1) reads only the first FractionRows(rows,
	// Fraction) rows of the source in storage order (Config.Subset), as
	// Ultralytics' fraction takes the first images of its file list: one
	// deterministic prefix, the same at any worker count, rank or seed,
	// shuffled within itself. 0 or 1: every row.
	Fraction float64
	Augment  augment.Config // see augment.DefaultConfig
	Stride   int            // mask grid stride, default 4

	WindowRows int   // shuffle window, default order.DefaultWindowRows
	CacheBytes int64 // decoded-image cache, default 512 MiB (a 512-row window of 640×480 images)
	// ImageCache, when set, is a decoded-image cache shared with other
	// loaders over the same source (rows are keyed by their index in the
	// source); CacheBytes is then ignored.
	ImageCache *ImageCache

	// MaxMemory bounds the loader's memory estimate (Memory): New refuses
	// a configuration over it with an error wrapping ErrMemoryLimit,
	// before allocating. Default DefaultMaxMemory(); negative: no limit.
	MaxMemory int64
	// MaxImagePixels bounds an image's width·height, read from its header
	// (or a pre-decoded row's size) before any pixel buffer exists: an
	// image over it is skipped and counted under imagehdr.ReasonTooLarge.
	// Default (0 or negative) imagehdr.MaxPixels. Under a memory budget
	// (MaxMemory > 0) an image whose decode (imagehdr.DecodeBytes) needs
	// more than its share of the budget's headroom is skipped the same
	// way, and a batch whose masks exceed its share leaves out its samples
	// with the most instances (SkipMaskBudget): see the package doc,
	// "Bad data". Rows with more than shard.MaxInstances instances are
	// always skipped (shard.ReasonTooManyInstances).
	MaxImagePixels int64

	// Strict makes the loader fail on the first skipped sample instead of
	// counting and logging it.
	Strict bool
	Logger *slog.Logger // default slog.Default()

	// Allocator is where every buffer of the records the loader returns
	// comes from (through its buffer pool, internal/bufpool) and goes back
	// to: buffers beyond the pool's retention, the retained ones at Close,
	// and those of records released after Close. Nil: the Go heap. A C
	// allocator (arrow-go's mallocator) makes the records safe to export
	// through the Arrow C data interface. Batch bytes do not depend on it.
	Allocator memory.Allocator
}

func (c *Config) withDefaults() (Config, error) {
	d := c.defaults()
	return d, d.validate()
}

// defaults returns c with the documented defaults applied.
func (c *Config) defaults() Config {
	d := *c
	if d.BatchSize == 0 {
		d.BatchSize = 32
	}
	if d.Workers == 0 {
		d.Workers = runtime.GOMAXPROCS(0)
	}
	if d.Prefetch == 0 {
		d.Prefetch = min(max(2*d.Workers, 2), maxDefaultPrefetch)
	}
	if d.Epochs == 0 {
		d.Epochs = d.Start.Epoch + 1
	}
	if d.WorldSize == 0 {
		d.WorldSize = 1
	}
	if d.Augment.ImgSz == 0 {
		d.Augment = augment.DefaultConfig()
	}
	if d.Stride == 0 {
		d.Stride = 4
	}
	if d.WindowRows == 0 {
		d.WindowRows = order.DefaultWindowRows
	}
	if d.CacheBytes == 0 {
		d.CacheBytes = DefaultCacheBytes
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.MaxMemory == 0 {
		d.MaxMemory = DefaultMaxMemory()
	}
	return d
}

// MaxKeepClasses bounds Config.Classes' length: a request carries the
// list, so it is bounded like every other field of one.
const MaxKeepClasses = 1 << 16

// DefaultCacheBytes is Config.CacheBytes's default.
const DefaultCacheBytes = 512 << 20

// MaxBatchSize is the largest BatchSize a Loader accepts: the loader sizes
// its queues by the batch size, so an absurd value would exhaust memory
// before the first image is read.
const MaxBatchSize = 1 << 16

// Validate reports whether New would accept c, with the documented defaults
// applied to zero fields, without opening any data. A server checks a
// client's request with it before it starts a loader.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// validate checks a configuration whose defaults are already applied.
func (d Config) validate() error {
	if err := d.validateShape(); err != nil {
		return err
	}
	return d.checkMemory(nil)
}

// ErrInvalidConfig marks a configuration New refuses for a setting out of
// range (batch size, workers, rank, imgsz, an augmentation setting), before
// it opens any data: the caller's settings are wrong, not the data.
var ErrInvalidConfig = errors.New("invalid loader configuration")

// invalidConfig is a setting's own message that also matches
// ErrInvalidConfig.
type invalidConfig struct{ err error }

func (e invalidConfig) Error() string   { return e.err.Error() }
func (e invalidConfig) Unwrap() []error { return []error{e.err, ErrInvalidConfig} }

// validateShape checks everything but the memory estimate; its errors
// match ErrInvalidConfig.
func (d Config) validateShape() error {
	if err := d.checkShape(); err != nil {
		return invalidConfig{err}
	}
	return nil
}

func (d Config) checkShape() error {
	switch {
	case d.BatchSize < 1 || d.BatchSize > MaxBatchSize:
		return fmt.Errorf("pipeline: batch size %d: want 1 to %d", d.BatchSize, MaxBatchSize)
	case d.Workers < 1:
		return fmt.Errorf("pipeline: %d workers", d.Workers)
	case d.Prefetch < 1:
		return fmt.Errorf("pipeline: prefetch %d", d.Prefetch)
	case d.WorldSize < 1 || d.Rank < 0 || d.Rank >= d.WorldSize:
		return fmt.Errorf("pipeline: rank %d of world size %d", d.Rank, d.WorldSize)
	case d.Start.Epoch < 0 || d.Start.Consumed < 0:
		return fmt.Errorf("pipeline: start state %+v", d.Start)
	case d.Epochs <= d.Start.Epoch:
		// A schedule that ends before it starts is a mistake, not an empty run.
		return fmt.Errorf("pipeline: epochs %d leaves nothing after start epoch %d", d.Epochs, d.Start.Epoch)
	case d.CloseMosaic < 0:
		return fmt.Errorf("pipeline: close mosaic %d", d.CloseMosaic)
	case d.Stride < 1 || d.Augment.ImgSz%d.Stride != 0:
		return fmt.Errorf("pipeline: imgsz %d is not a multiple of the mask stride %d", d.Augment.ImgSz, d.Stride)
	case d.CacheBytes < 0:
		return fmt.Errorf("pipeline: cache bytes %d", d.CacheBytes)
	case !(d.Fraction >= 0 && d.Fraction <= 1): // also refuses NaN
		return fmt.Errorf("pipeline: fraction %v: want a share in (0, 1], or 0 for every row", d.Fraction)
	case len(d.Classes) > MaxKeepClasses:
		return fmt.Errorf("pipeline: %d classes to keep: at most %d", len(d.Classes), MaxKeepClasses)
	}
	for _, c := range d.Classes {
		if c < 0 {
			return fmt.Errorf("pipeline: class %d to keep: want a class index, at least 0", c)
		}
	}
	return d.Augment.Validate()
}
