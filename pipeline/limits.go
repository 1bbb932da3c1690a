package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
)

// Skip reasons of the loader's own bounds (see limits). Like the Skip*
// constants they appear in Stats.Skipped and skipped.json; never rename one.
const (
	// SkipMaskBudget counts samples a batch leaves out because its masks
	// would exceed the batch's share of the memory budget.
	SkipMaskBudget = "mask_budget"
	// SkipBadClass counts instances left out of a delivered sample because
	// their class index lies outside the set's categories.
	SkipBadClass = "bad_class"
)

// ErrEmptySet is wrapped by the error OpenShards and New return for a
// source with no rows: a run over it would succeed with nothing.
var ErrEmptySet = errors.New("shard set has no rows")

// limits are the loader's bounds on what one row, and one batch, may make
// it allocate. They are computed once in New from the configuration and the
// source alone, never from the worker count, the prefetch default or
// timing, so which rows are refused is the same in every run of a
// configuration and batches stay identical at any worker count.
type limits struct {
	maxPixels int64 // one image's width·height
	// imageBytes bounds one image's decode (imagehdr.DecodeBytes); 0 when
	// the loader has no memory budget.
	imageBytes int64
	// maskBytes bounds one batch's masks, boxes, classes and crowd flags;
	// 0 when the loader has no memory budget.
	maskBytes int64
	// classes is the category count: an instance's class must lie in
	// [0, classes). 0 when the source does not say.
	classes int32
	// keep is Config.Classes sorted, nil to keep every class; single is
	// Config.SingleClass.
	keep   []int32
	single bool
}

// instanceColumnBytes is what an instance adds to a batch beside its mask
// plane: a box (4 float32), a class (int32) and a crowd flag.
const instanceColumnBytes = 16 + 4 + 1

// maxDefaultPrefetch caps Config.Prefetch's default.
const maxDefaultPrefetch = 8

// limits computes the bounds of a loader with configuration d (defaults
// applied) over src. The budget's headroom H is MaxMemory minus the Budget
// of the estimate of the same settings with one worker and at most two
// batches ahead: the smallest loader of this batch, imgsz, cache and
// window, so that H does not change with the worker count. Half of H is
// for one image's decode beyond its share of the Decoding term
// (EstimateImageBytes), the other half for the masks of the batches in
// flight beyond the estimate's estimateInstances planes an image, split
// between as many batches as may exist at once with the default prefetch
// or the configured one, whichever is more.
func (d Config) limits(src Source) limits {
	lim := limits{maxPixels: d.MaxImagePixels, single: d.SingleClass}
	if len(d.Classes) > 0 {
		lim.keep = slices.Clone(d.Classes)
		slices.Sort(lim.keep)
	}
	if lim.maxPixels <= 0 {
		lim.maxPixels = imagehdr.MaxPixels
	}
	if d.MaxMemory > 0 {
		ref := d
		ref.Workers, ref.Prefetch = 1, min(d.Prefetch, 2)
		head := max(d.MaxMemory-Budget(ref.memory(src).Total()), 0)
		lim.imageBytes = head/2 + EstimateImageBytes
		g := int64(d.CanvasSide() / d.Stride)
		batches := int64(max(d.Prefetch, maxDefaultPrefetch) + 4)
		lim.maskBytes = int64(d.BatchSize)*estimateInstances*(g*g+instanceColumnBytes) + head/2/batches
	}
	if ms, ok := src.(interface{ Manifest() *shard.Manifest }); ok {
		if m := ms.Manifest(); m != nil {
			lim.classes = int32(len(m.Categories))
		}
	}
	return lim
}

// imageSize reads and checks the size of a row's image before any pixel
// buffer exists: an encoded file's from its header, a pre-decoded row's
// from its width and height. bpp is the bytes a pixel of the decoder's own
// image (0 for pre-decoded pixels, copied straight to RGB). An image over
// the bounds fails with an error wrapping imagehdr.ErrTooLarge; one whose
// header cannot be read fails like an image that does not decode.
func (lim *limits) imageSize(row *shard.Image) (w, h, bpp int, err error) {
	if shard.Predecoded(row.Format) {
		w, h = int(row.Width), int(row.Height)
	} else {
		hdr, err := imagehdr.Read(row.Bytes)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("image header: %w", err)
		}
		w, h, bpp = hdr.Width, hdr.Height, hdr.BytesPerPixel
	}
	return w, h, bpp, imagehdr.Check(w, h, bpp, lim.maxPixels, lim.imageBytes)
}

// decodeGate bounds the bytes that decodes of images larger than the
// estimate assumes hold beyond it at once: each such decode reserves its
// excess over EstimateImageBytes (never more than the gate holds, since
// imageSize refuses larger images) and waits until the reservation fits.
// Waiting, not refusing, keeps the outcome independent of timing.
type decodeGate struct {
	mu   sync.Mutex
	free int64
	wake chan struct{} // closed at every release
}

func newDecodeGate(capacity int64) *decodeGate {
	return &decodeGate{free: capacity, wake: make(chan struct{})}
}

// acquire reserves n bytes, waiting for them; it fails only when ctx ends.
func (g *decodeGate) acquire(ctx context.Context, n int64) error {
	for {
		g.mu.Lock()
		if n <= g.free {
			g.free -= n
			g.mu.Unlock()
			return nil
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *decodeGate) release(n int64) {
	g.mu.Lock()
	g.free += n
	close(g.wake)
	g.wake = make(chan struct{})
	g.mu.Unlock()
}

// validClasses returns the instances of ins a sample takes, in order, and
// the indices of those left out as damage. An instance whose class lies
// outside [0, lim.classes) (when the source gave categories) is damage;
// one whose class is not in lim.keep is left out uncounted (Config.Classes);
// under lim.single the rest take class 0. ins is returned as it is when no
// instance changes; otherwise the kept ones are copied into *buf (grown as
// needed and kept for the next call), since a row's instances belong to
// its source.
func (lim *limits) validClasses(ins []shard.Instance, buf *[]shard.Instance) (kept []shard.Instance, dropped []int) {
	if lim.classes <= 0 && lim.keep == nil && !lim.single {
		return ins, nil
	}
	same := true
	for i := range ins {
		switch c := ins[i].Class; {
		case lim.bad(c):
			dropped = append(dropped, i)
			same = false
		case !lim.wanted(c) || (lim.single && c != 0):
			same = false
		}
	}
	if same {
		return ins, nil
	}
	kept = (*buf)[:0]
	for i := range ins {
		if c := ins[i].Class; lim.bad(c) || !lim.wanted(c) {
			continue
		}
		kept = append(kept, ins[i])
		if lim.single {
			kept[len(kept)-1].Class = 0
		}
	}
	*buf = kept
	return kept, dropped
}

// bad reports whether class c lies outside the source's categories.
// Under SingleClass only a negative class is: Ultralytics' single_cls
// checks no upper bound (every class becomes 0), so an index past the
// categories is kept there, and here, as class 0.
func (lim *limits) bad(c int32) bool {
	return lim.classes > 0 && (c < 0 || (c >= lim.classes && !lim.single))
}

// wanted reports whether Config.Classes keeps class c.
func (lim *limits) wanted(c int32) bool {
	if lim.keep == nil {
		return true
	}
	_, ok := slices.BinarySearch(lim.keep, c)
	return ok
}

// trimMasks leaves out of j, before its mask buffer is sized, the samples
// whose masks would take the batch over lim.maskBytes: the sample with
// the most instances first (the later one of a tie), until the rest fit.
// The choice depends on the batch's samples alone.
func (l *Loader) trimMasks(j *job) {
	if l.lim.maskBytes <= 0 {
		return
	}
	per := int64(l.grid.Cells()) + instanceColumnBytes
	var total int64
	var idx []int
	for i := 0; i < j.n; i++ {
		if s := &j.samples[i]; s.ok {
			total += int64(s.labels.N()) * per
			idx = append(idx, i)
		}
	}
	if total <= l.lim.maskBytes {
		return
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(j.samples[b].labels.N(), j.samples[a].labels.N()); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	for _, i := range idx {
		if total <= l.lim.maskBytes {
			break
		}
		s := &j.samples[i]
		need := int64(s.labels.N()) * per
		total -= need
		s.ok = false
		l.skip(j, s.row, s.imageID, true, SkipMaskBudget,
			fmt.Errorf("%d instances need %d mask bytes; the batch's bound is %d bytes (its share of the memory budget)",
				s.labels.N(), need, l.lim.maskBytes))
	}
}

// emptySet is New's error for a source without rows (OpenShards refuses
// an empty shard set first, naming its location).
func emptySet(src Source) error {
	what := fmt.Sprintf("source %T", src)
	if ls, ok := src.(interface{ Location() string }); ok {
		what = "shard set " + ls.Location()
	}
	return fmt.Errorf("pipeline: %s: %w", what, ErrEmptySet)
}
