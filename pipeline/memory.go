package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"runtime/metrics"
	"slices"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/internal/sysmem"
	"github.com/segpipe/segpipe/pipeline/augment"
)

// ErrMemoryLimit marks a configuration whose memory estimate exceeds the
// limit it runs under (Config.MaxMemory, or a server's budget). It is
// refused before anything is allocated: a user error, not a failure.
var ErrMemoryLimit = errors.New("memory limit")

// The estimate's assumptions about data it has not seen yet.
const (
	// estimateInstances is the mean instance count per image the memory
	// estimate assumes for the mask stack (COCO averages 7.3).
	estimateInstances = 8
	// EstimateImageBytes is the decoded size the estimate assumes for an
	// image: 3 bytes a pixel at 640×640, COCO's largest side.
	EstimateImageBytes = 3 * 640 * 640
	// EstimateRowBytes is the encoded size of a row the estimate assumes
	// when the source does not say (EncodedSource): COCO's mean JPEG is
	// about 160 KB.
	EstimateRowBytes = 160 << 10
	// ProcessBytes is what a segpipe process holds before any loader: the
	// Go runtime, goroutine stacks and the resident part of the binary
	// (`segpipe serve` idles at about 60 MiB of RSS).
	ProcessBytes = 64 << 20
)

// cacheFreeBuffers is how many evicted pixel buffers the decoded-image
// cache keeps for reuse (the cache's free list).
const cacheFreeBuffers = maxFree

// Memory is a loader's memory estimate in bytes: the memory it keeps live,
// term by term. The process around it adds ProcessBytes and the garbage
// collector's headroom (Budget).
type Memory struct {
	// Batches is the batch buffers: images (3·imgsz² bytes an image),
	// masks (estimateInstances planes of (imgsz/stride)² bytes an image)
	// and the small columns, for every batch in flight (Prefetch, one
	// being dispatched, one waiting in Next, two held by the consumer).
	Batches int64
	// Batch is one batch's buffers, of which Batches counts every one in
	// flight; not a term of Total. A server holds one more per stream
	// while it sends (see pipeline/remote).
	Batch int64
	// Cache is the decoded-image cache (CacheBytes); 0 when the loader
	// uses a shared ImageCache, which its owner accounts for (CacheMemory).
	Cache int64
	// CacheFree is the cache's free list: evicted pixel buffers kept for
	// the next decodes, cacheFreeBuffers of EstimateImageBytes; 0 with a
	// shared ImageCache (its owner's, CacheMemory).
	CacheFree int64
	// Decoding is the decoded images the workers hold beyond the cache's
	// bound: an entry in use is never evicted, so every worker can hold
	// the four images of a mosaic (and four more for each of a mixup and a
	// cutmix partner and for each mixup-mode copy-paste source, with a
	// canvas-sized scratch image for mixing or pasting, two when a partner
	// pastes), and the newest entry is admitted before the oldest goes;
	// EstimateImageBytes each.
	Decoding int64
	// Window is the encoded rows: the shuffle reads whole blocks (row
	// groups) into a window of at least WindowRows rows, and holds two
	// windows while the next is read, so 2 × (WindowRows rows and one
	// row group past them). Rows are EstimateRowBytes each unless the
	// source says (EncodedSource); never more than twice the source.
	Window int64
}

// Total is the loader's live memory: the sum of the terms.
func (m Memory) Total() int64 { return m.Batches + m.Cache + m.CacheFree + m.Decoding + m.Window }

// Budget is the memory a process running loaders of live bytes in all
// needs: ProcessBytes plus live plus the garbage collector's headroom
// (GCHeadroom). A configuration fits a memory limit when Budget(Total())
// does.
func Budget(live int64) int64 { return ProcessBytes + live + GCHeadroom(live) }

// GCHeadroom is the garbage a heap of live bytes may grow by before the
// collector runs: live × GOGC/100 (the segpipe binary runs at GOGC=25).
// With GOGC off it is live again, since a memory limit then decides.
func GCHeadroom(live int64) int64 { return live * gcPercent() / 100 }

// gcPercent reads the collector's current GOGC.
func gcPercent() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	p := int64(s[0].Value.Uint64())
	if p <= 0 {
		return 100
	}
	return p
}

// CacheMemory is the memory of a shared ImageCache of maxBytes: its bound
// and its free list (the loaders using it count the images they hold).
func CacheMemory(maxBytes int64) int64 { return maxBytes + cacheFreeBuffers*EstimateImageBytes }

// EncodedSource is a Source that may know the encoded size of its rows (a
// shard set's manifest does); the memory estimate then uses it for the
// window of encoded rows instead of EstimateRowBytes.
type EncodedSource interface {
	Source
	// EncodedBytes is the encoded size of all the source's rows, 0 when
	// unknown.
	EncodedBytes() int64
}

// DefaultMaxMemory is the default Config.MaxMemory: half the memory the
// process may use (physical memory or the cgroup limit), 0 (no limit)
// where that is unknown.
func DefaultMaxMemory() int64 { return sysmem.Total() / 2 }

// Memory returns the memory estimate of a loader with this configuration
// (defaults applied), computed from the settings alone: batch size, imgsz,
// stride, prefetch, workers, window and cache. It fails only if the
// configuration is invalid for reasons other than memory.
func (c Config) Memory() (Memory, error) { return c.MemoryOf(nil) }

// MemoryOf is Memory for a loader over src: a source that reports its
// encoded size (EncodedSource) sizes the window term by its own rows.
// New judges a configuration by it.
func (c Config) MemoryOf(src Source) (Memory, error) {
	d := c.defaults()
	if err := d.validateShape(); err != nil {
		return Memory{}, err
	}
	return d.memory(src), nil
}

func (d Config) memory(src Source) Memory {
	s := int64(d.CanvasSide()) // the stream's canvas: imgsz, or larger for rect and multi_scale
	g := s / int64(d.Stride)
	perImage := 3*s*s + estimateInstances*(g*g+16+4+1) + 8 + 4 + 4 + 48 + 4 + 4
	tiles, scratch := int64(4), int64(0)
	if a := d.Augment; !d.Val {
		// A mixup-mode copy-paste fetches a source (a mosaic's four) for
		// the sample and for each partner; mixing renders each part into
		// a scratch image, and a partner's own paste into a second one.
		paste, src := a.CopyPaste > 0, int64(0)
		if paste && a.CopyPasteMode == augment.PasteMixup {
			src = 4
		}
		tiles += src
		mixing := a.Mixup > 0 || a.Cutmix > 0
		for _, on := range []bool{a.Mixup > 0, a.Cutmix > 0} {
			if on {
				tiles += 4 + src
			}
		}
		switch {
		case paste && mixing:
			scratch = 2 * int64(d.Workers) * 3 * s * s
		case paste || mixing:
			scratch = int64(d.Workers) * 3 * s * s
		}
	}
	m := Memory{
		Batch:    int64(d.BatchSize) * perImage,
		Batches:  d.inFlight() * int64(d.BatchSize) * perImage,
		Decoding: (tiles*int64(d.Workers)+1)*EstimateImageBytes + scratch,
	}
	if d.ImageCache == nil {
		m.Cache = d.CacheBytes
		m.CacheFree = cacheFreeBuffers * EstimateImageBytes
	}
	rowBytes, all, rows := int64(EstimateRowBytes), int64(-1), int64(d.WindowRows)
	if src != nil {
		// A window never holds more rows than the source has.
		var n int64
		for _, b := range src.BlockRows() {
			n += int64(b)
		}
		rows = min(rows, n)
		if es, ok := src.(EncodedSource); ok && es.EncodedBytes() > 0 {
			if all = es.EncodedBytes(); n > 0 {
				rowBytes = (all + n - 1) / n
			}
		}
	}
	w := rows*rowBytes + shard.DefaultRowGroupBytes
	if all >= 0 {
		w = min(w, all)
	}
	m.Window = 2 * w
	return m
}

// inFlight is the number of batches whose buffers exist at once.
func (d Config) inFlight() int64 { return int64(d.Prefetch) + 4 }

func (d Config) checkMemory(src Source) error {
	if d.MaxMemory <= 0 {
		return nil
	}
	m := d.memory(src)
	need := Budget(m.Total())
	if need <= d.MaxMemory {
		return nil
	}
	return fmt.Errorf("pipeline: batch size %d at imgsz %d needs an estimated %s (%s), over the memory limit of %s: %s: %w",
		d.BatchSize, d.Augment.ImgSz, bytesize.Format(need), m.terms(), bytesize.Format(d.MaxMemory), m.Advice(), ErrMemoryLimit)
}

// Advice names the settings that shrink the estimate, the largest of its
// terms first, so that a refusal points at what to change: a small
// machine is usually over budget through the shuffle window or the
// cache, not through the batch.
func (m Memory) Advice() string {
	type knob struct {
		bytes int64
		what  string
	}
	knobs := []knob{
		{m.Batches + m.Decoding, "the batch size or imgsz"},
		{m.Cache + m.CacheFree, "the decoded-image cache"},
		{m.Window, "the shuffle window"},
	}
	slices.SortStableFunc(knobs, func(a, b knob) int { return cmp.Compare(b.bytes, a.bytes) })
	return fmt.Sprintf("lower %s, %s or %s", knobs[0].what, knobs[1].what, knobs[2].what)
}

// terms lists the estimate's terms with the process and collector parts,
// for messages and logs.
func (m Memory) terms() string {
	t := m.Total()
	return fmt.Sprintf("batches %s, cache %s, cache free list %s, images being decoded %s, encoded window %s, process %s, GC headroom %s",
		bytesize.Format(m.Batches), bytesize.Format(m.Cache), bytesize.Format(m.CacheFree), bytesize.Format(m.Decoding),
		bytesize.Format(m.Window), bytesize.Format(ProcessBytes), bytesize.Format(GCHeadroom(t)))
}

// String is the estimate with its terms: the whole budget first.
func (m Memory) String() string {
	return fmt.Sprintf("%s (%s)", bytesize.Format(Budget(m.Total())), m.terms())
}
