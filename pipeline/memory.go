package pipeline

import (
	"errors"
	"fmt"

	"github.com/segpipe/segpipe/internal/sysmem"
)

// ErrMemoryLimit marks a configuration whose memory estimate exceeds the
// limit it runs under (Config.MaxMemory, or a server's budget). It is
// refused before anything is allocated: a user error, not a failure.
var ErrMemoryLimit = errors.New("memory limit")

// EstimateInstances is the mean instance count per image the memory
// estimate assumes for the mask stack (COCO averages 7.3).
const EstimateInstances = 8

// Memory is a loader's memory estimate in bytes.
type Memory struct {
	// Batches is the batch buffers: images (3·imgsz² bytes an image),
	// masks (EstimateInstances planes of (imgsz/stride)² bytes an image)
	// and the small columns, for every batch in flight (Prefetch, one
	// being dispatched, one waiting in Next, two held by the consumer).
	Batches int64
	// Cache is the decoded-image cache (CacheBytes); 0 when the loader
	// uses a shared ImageCache, which its owner accounts for.
	Cache int64
}

// Total is Batches + Cache.
func (m Memory) Total() int64 { return m.Batches + m.Cache }

// DefaultMaxMemory is the default Config.MaxMemory: half the memory the
// process may use (physical memory or the cgroup limit), 0 (no limit)
// where that is unknown.
func DefaultMaxMemory() int64 { return sysmem.Total() / 2 }

// Memory returns the memory estimate of a loader with this configuration
// (defaults applied), computed from the settings alone: batch size, imgsz,
// stride, prefetch and cache. It fails only if the configuration is
// invalid for reasons other than memory.
func (c Config) Memory() (Memory, error) {
	d := c.defaults()
	if err := d.validateShape(); err != nil {
		return Memory{}, err
	}
	return d.memory(), nil
}

func (d Config) memory() Memory {
	s := int64(d.Augment.ImgSz)
	g := s / int64(d.Stride)
	perImage := 3*s*s + EstimateInstances*(g*g+16+4+1) + 8 + 4 + 4 + 48 + 4 + 4
	m := Memory{Batches: d.inFlight() * int64(d.BatchSize) * perImage}
	if d.ImageCache == nil {
		m.Cache = d.CacheBytes
	}
	return m
}

// inFlight is the number of batches whose buffers exist at once.
func (d Config) inFlight() int64 { return int64(d.Prefetch) + 4 }

func (d Config) checkMemory() error {
	if d.MaxMemory <= 0 {
		return nil
	}
	m := d.memory()
	if m.Total() <= d.MaxMemory {
		return nil
	}
	return fmt.Errorf("pipeline: batch size %d at imgsz %d needs an estimated %s (batches %s, cache %s), over the memory limit of %s: lower the batch size, imgsz or cache: %w",
		d.BatchSize, d.Augment.ImgSz, FormatBytes(m.Total()), FormatBytes(m.Batches), FormatBytes(m.Cache), FormatBytes(d.MaxMemory), ErrMemoryLimit)
}

// FormatBytes writes n in binary units ("1.5 GiB").
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
