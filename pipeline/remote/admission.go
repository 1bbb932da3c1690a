package remote

import (
	"fmt"
	"runtime/debug"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/pipeline"
)

// DefaultMaxStreams is ServerConfig.MaxStreams's default.
const DefaultMaxStreams = 64

// admission is the server's memory budget and stream limit. A stream is
// admitted when the process's estimate with it (pipeline.Budget of the live
// memory of every stream and shared cache) fits in the budget; otherwise it
// is refused before its loader exists: with ResourceExhausted (retry
// later) when the running streams leave too little, with
// FailedPrecondition (do not retry) when it is over the whole budget.
//
// A stream's live memory (streamBytes) is its loader's estimate
// (pipeline.Config.MemoryOf its shard set) without the shared cache, plus
// its send buffer: one batch, the windowed copy a stream of windowed masks
// encodes while the previous one is on the wire. A shard set's cache
// (pipeline.CacheMemory) counts once, while any stream of that set runs.
type admission struct {
	mu         sync.Mutex
	maxBytes   int64 // ≤ 0: no memory budget
	maxStreams int
	cacheBytes int64 // each shard set's shared cache
	used       int64 // live bytes of the running streams and their caches
	streams    int
	caches     map[string]*setCache
	// typical is the stream estimate (streamBytes) readiness is judged
	// by: the last admitted stream's (a fleet's trainers send alike requests), the
	// default request's before the first.
	typical int64

	// freeOS returns memory to the operating system once the last stream
	// has ended (debug.FreeOSMemory; replaced in tests).
	freeOS func()
}

// setCache is the decoded-image cache the streams of one shard set share.
type setCache struct {
	cache *pipeline.ImageCache
	refs  int
}

func newAdmission(maxBytes int64, maxStreams int, cacheBytes int64) *admission {
	return &admission{maxBytes: maxBytes, maxStreams: maxStreams, cacheBytes: cacheBytes,
		caches: map[string]*setCache{}, freeOS: debug.FreeOSMemory}
}

// refusal is a status error that says why and what to do; reason labels
// the refused counter.
type refusal struct {
	reason string
	err    error
}

// admit reserves a stream of shard set set whose loader config is cfg
// (without ImageCache) over src. It returns the config with the set's
// shared cache and the function that gives the reservation back.
func (a *admission) admit(set string, cfg pipeline.Config, src pipeline.Source) (pipeline.Config, func(), *refusal) {
	m, err := cfg.MemoryOf(src)
	if err != nil {
		return cfg, nil, &refusal{"bad_request", grpcError(fmt.Errorf("%w: %w", ErrBadRequest, err))}
	}
	stream := streamBytes(m)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.streams >= a.maxStreams {
		return cfg, nil, &refusal{"streams", status.Errorf(codes.ResourceExhausted,
			"segpipe serve: %d streams running, the server's limit (--max-streams %d); retry later or use another server", a.streams, a.maxStreams)}
	}
	sc := a.caches[set]
	need := stream
	if sc == nil {
		need += pipeline.CacheMemory(a.cacheBytes)
	}
	if a.maxBytes > 0 && pipeline.Budget(a.used+need) > a.maxBytes {
		if alone := pipeline.Budget(stream + pipeline.CacheMemory(a.cacheBytes)); alone > a.maxBytes {
			return cfg, nil, &refusal{"memory", status.Errorf(codes.FailedPrecondition,
				"segpipe serve: batch_size %d at imgsz %d needs an estimated %s with its shard set's cache (%s), over the server's whole memory budget of %s (--max-memory): lower batch_size or imgsz",
				cfg.BatchSize, cfg.Augment.ImgSz, bytesize.Format(alone), m, bytesize.Format(a.maxBytes))}
		}
		return cfg, nil, &refusal{"memory", status.Errorf(codes.ResourceExhausted,
			"segpipe serve: batch_size %d at imgsz %d needs an estimated %s; %d streams hold %s of the %s budget (--max-memory); retry later or lower batch_size or imgsz",
			cfg.BatchSize, cfg.Augment.ImgSz, bytesize.Format(need), a.streams, bytesize.Format(pipeline.Budget(a.used)), bytesize.Format(a.maxBytes))}
	}
	if sc == nil {
		sc = &setCache{cache: pipeline.NewImageCache(a.cacheBytes)}
		a.caches[set] = sc
		a.used += pipeline.CacheMemory(a.cacheBytes)
	}
	sc.refs++
	a.used += stream
	a.streams++
	a.typical = stream
	cfg.ImageCache = sc.cache
	var once sync.Once
	return cfg, func() { once.Do(func() { a.release(set, stream) }) }, nil
}

// streamBytes is a stream's live memory beside its shard set's cache: its
// loader's own terms and one batch being sent.
func streamBytes(m pipeline.Memory) int64 {
	return m.Total() - m.Cache - m.CacheFree + m.Batch
}

// estimate is the process's memory estimate with the streams running now
// (pipeline.Budget of their live memory).
func (a *admission) estimate() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return pipeline.Budget(a.used)
}

func (a *admission) release(set string, stream int64) {
	a.mu.Lock()
	a.used -= stream
	a.streams--
	if sc := a.caches[set]; sc != nil {
		if sc.refs--; sc.refs == 0 {
			delete(a.caches, set)
			a.used -= pipeline.CacheMemory(a.cacheBytes)
		}
	}
	idle := a.streams == 0
	a.mu.Unlock()
	if idle {
		// The loaders' pools and the caches are garbage now; without this
		// the runtime returns their pages to the OS over minutes.
		go a.freeOS()
	}
}

// ready reports whether a stream like the last admitted one (before the
// first: a default request, batch 32 at imgsz 640, under the server's
// loader settings) would be admitted now, and why not.
func (a *admission) ready(base pipeline.Config) (bool, string) {
	a.mu.Lock()
	typical := a.typical
	a.mu.Unlock()
	if typical == 0 {
		base.MaxMemory = -1 // judged against the budget below
		cfg, err := Request{Version: RequestVersion}.Config(base)
		if err != nil {
			return false, err.Error()
		}
		m, err := cfg.Memory()
		if err != nil {
			return false, err.Error()
		}
		typical = streamBytes(m)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.streams >= a.maxStreams {
		return false, fmt.Sprintf("%d streams running, the limit", a.streams)
	}
	need := typical
	if len(a.caches) == 0 {
		need += pipeline.CacheMemory(a.cacheBytes)
	}
	// "In use" is what the streams and their caches hold; the budget also
	// covers the process itself and the collector's headroom (Budget).
	if a.maxBytes > 0 && pipeline.Budget(a.used+need) > a.maxBytes {
		return false, fmt.Sprintf("%s of the %s memory budget in use, a new stream needs %s",
			bytesize.Format(a.used), bytesize.Format(a.maxBytes), bytesize.Format(need))
	}
	return true, fmt.Sprintf("%d streams, %s of %s in use", a.streams, bytesize.Format(a.used), bytesize.Format(a.maxBytes))
}
