package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
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
	// Rect makes rectangular batches, as Ultralytics' rect (its
	// validation default): the images in order of aspect ratio
	// (height/width, storage order among equals; no shuffle, in training
	// too, as Ultralytics turns its shuffle off, unless every batch would
	// take one shape: then Ultralytics, and segpipe, keep the shuffle and
	// that shape), each batch on the shape
	// RectShape gives for its images' aspect ratios (validation; training
	// pads by no stride, RectTrainShape). Validation letterboxes each
	// image, centred and never enlarged, onto it; training draws the
	// random perspective onto it (augment.NewRectPlan) with mosaic, mixup
	// and cutmix off, as Ultralytics has them with rect. Every such shape
	// fits the stream's canvas, CanvasSide; a batch carries its shape in
	// the batch.ColCanvas column, its images at the canvas' top left. The
	// sort reads every row once when the loader starts and holds the
	// whole set's encoded rows (one shuffle window). Not with MultiScale.
	Rect bool
	// MultiScale m in (0, 1) draws each training batch's canvas side as
	// Ultralytics' multi_scale does (MultiScaleSize: on the 32 px grid,
	// from max(32, imgsz·(1-m)) to imgsz·(1+m)) from the batch's own
	// stream, so the same at any worker count; every sample of the batch
	// is augmented at that side (masks at the mask stride of it) and
	// carried at the top left of a canvas of CanvasSide, the side in the
	// batch.ColCanvas column; mixup and cutmix partners are drawn at that
	// side too. 0: off. Training only (Ultralytics draws it in training
	// alone).
	MultiScale float64
	Augment    augment.Config // see augment.DefaultConfig
	Stride     int            // mask grid stride, default 4

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
	case d.Rect && d.MultiScale > 0:
		return errors.New("pipeline: rect and multi_scale both shape the batches: ask for one")
	case !(d.MultiScale >= 0 && d.MultiScale < 1): // also refuses NaN
		return fmt.Errorf("pipeline: multi_scale %v: want a share in [0, 1)", d.MultiScale)
	case d.MultiScale > 0 && d.Val:
		return errors.New("pipeline: multi_scale applies to training batches only, as Ultralytics draws it; validation keeps imgsz")
	case d.MultiScale > 0 && d.Augment.ImgSz%scaleStride != 0:
		return fmt.Errorf("pipeline: multi_scale: imgsz %d is not a multiple of %d", d.Augment.ImgSz, scaleStride)
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

// scaleStride is the grid of rect shapes and multi-scale sizes:
// Ultralytics' model stride, 32 for every YOLO segmentation model.
const scaleStride = 32

// rectPad is Ultralytics' rect padding for validation, in strides
// (build_yolo_dataset: pad 0.5 unless training, then 0).
const rectPad = 0.5

// CanvasSide returns the side of the stream's square canvas: imgsz, or
// with Rect the largest RectShape (a batch of square images), with
// MultiScale the largest MultiScaleSize. Defaults apply to zero fields.
func (c Config) CanvasSide() int {
	s := c.Augment.ImgSz
	if s == 0 {
		s = augment.DefaultImgSz
	}
	switch {
	case c.Rect:
		h, _ := c.rectShape(1, 1, s)
		return max(h, s)
	case c.MultiScale > 0:
		_, hi := multiScaleRange(s, c.MultiScale)
		return max(hi, s)
	}
	return s
}

// HasCanvas reports whether the stream's batches carry the
// batch.ColCanvas column (Rect or MultiScale).
func (c Config) HasCanvas() bool { return c.Rect || c.MultiScale > 0 }

// NewBatchBuilder returns the builder of the stream c makes: its records'
// schema, which a server announces before the first batch.
func (c Config) NewBatchBuilder() (*batch.Builder, error) {
	s, stride := c.CanvasSide(), c.Stride
	if stride == 0 {
		stride = 4
	}
	if stride < 1 || s%stride != 0 {
		return nil, fmt.Errorf("pipeline: canvas %d is not a multiple of the mask stride %d", s, stride)
	}
	if c.HasCanvas() {
		return batch.NewCanvasBuilder(s, s, s/stride, s/stride)
	}
	return batch.NewBuilder(s, s, s/stride, s/stride)
}

// RectShape returns the (height, width) of a rect batch whose images'
// aspect ratios (height/width) range over [lo, hi], as Ultralytics'
// set_rectangle computes it for imgsz s: shape (hi, 1) when hi < 1,
// (1, 1/lo) when lo > 1, else (1, 1), each side
// ceil(side·s/32 + 0.5)·32, in float64 in numpy's order of operations.
func RectShape(lo, hi float64, s int) (h, w int) { return rectShape(lo, hi, s, rectPad) }

// RectTrainShape is RectShape for a training batch: Ultralytics pads
// training's rect shapes by no stride, so no side passes s (a multiple of
// 32).
func RectTrainShape(lo, hi float64, s int) (h, w int) { return rectShape(lo, hi, s, 0) }

// rectShape is the shape of c's rect batches (validation's or training's).
func (c Config) rectShape(lo, hi float64, s int) (h, w int) {
	if c.Val {
		return RectShape(lo, hi, s)
	}
	return RectTrainShape(lo, hi, s)
}

func rectShape(lo, hi float64, s int, pad float64) (h, w int) {
	sh, sw := 1.0, 1.0
	switch {
	case hi < 1:
		sh = hi
	case lo > 1:
		sw = 1 / lo
	}
	side := func(x float64) int {
		return int(math.Ceil(x*float64(s)/scaleStride+pad)) * scaleStride
	}
	return side(sh), side(sw)
}

// multiScaleRange returns the least and the largest side MultiScaleSize
// draws.
func multiScaleRange(s int, m float64) (lo, hi int) {
	a, b := multiScaleBounds(s, m)
	return a / scaleStride * scaleStride, (b - 1) / scaleStride * scaleStride
}

// multiScaleBounds are Ultralytics' randrange bounds [a, b).
func multiScaleBounds(s int, m float64) (a, b int) {
	return max(scaleStride, int(float64(s)*(1-m))), int(float64(s)*(1+m) + scaleStride)
}

// MultiScaleSize draws a batch's side as Ultralytics' preprocess_batch
// does for imgsz s and multi_scale m: randrange(max(32, int(s·(1-m))),
// int(s·(1+m)+32)) // 32 · 32, the integer drawn uniformly from rng.
func MultiScaleSize(rng *rand.PCG, s int, m float64) int {
	a, b := multiScaleBounds(s, m)
	return (a + int(order.IntN(rng, uint64(b-a)))) / scaleStride * scaleStride
}
