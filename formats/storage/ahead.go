package storage

import (
	"context"
	"sync"
	"time"
)

// aheadPool holds ranges fetched ahead of their reader, bounded in bytes
// (in flight and held together). An entry is handed over once, to the
// reader that takes it. A new fetch that does not fit waits for room
// rather than displacing an earlier one (readers ask in the order they
// read), except that entries left untaken for staleAhead (a reader that
// stopped) are dropped to make room.
type aheadPool struct {
	mu     sync.Mutex
	budget int64
	used   int64
	seq    uint64
	m      map[aheadKey]*aheadEntry
	// slots bounds the concurrent fetches: a few keep a link busy
	// without queueing the reader's own request behind many others.
	slots chan struct{}
}

type aheadKey struct {
	ident string
	r     Range
}

type aheadEntry struct {
	done chan struct{}
	b    []byte
	err  error
	seq  uint64
	n    int64
	at   time.Time // when the fetch finished
}

const staleAhead = 30 * time.Second

const aheadFetches = 4

func newAheadPool(budget int64) *aheadPool {
	return &aheadPool{budget: budget, m: map[aheadKey]*aheadEntry{}, slots: make(chan struct{}, aheadFetches)}
}

// start fetches key in the background unless it is already there. It
// returns false when the budget has no room for n (after dropping stale
// entries): the caller asks again once a reader has taken something.
func (a *aheadPool) start(key aheadKey, n int64, fetch func() ([]byte, error)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.m[key]; ok {
		return true
	}
	if n > a.budget {
		return false
	}
	for a.used+n > a.budget {
		if !a.dropStaleLocked() {
			return false
		}
	}
	a.seq++
	e := &aheadEntry{done: make(chan struct{}), seq: a.seq, n: n}
	a.m[key] = e
	a.used += n
	go func() {
		a.slots <- struct{}{}
		e.b, e.err = fetch()
		<-a.slots
		a.mu.Lock()
		e.at = time.Now()
		a.mu.Unlock()
		close(e.done)
	}()
	return true
}

func (a *aheadPool) dropStaleLocked() bool {
	var oldest aheadKey
	var oe *aheadEntry
	for k, e := range a.m {
		select {
		case <-e.done:
		default:
			continue // in flight: it cannot be dropped
		}
		if time.Since(e.at) < staleAhead {
			continue
		}
		if oe == nil || e.seq < oe.seq {
			oldest, oe = k, e
		}
	}
	if oe == nil {
		return false
	}
	delete(a.m, oldest)
	a.used -= oe.n
	return true
}

// take hands over key's bytes, waiting for its fetch if in flight, or
// until ctx is done. ok is false when the key was never started, was
// dropped, or failed, or ctx ended the wait (the caller then reads it
// itself and gets the error with its context).
func (a *aheadPool) take(ctx context.Context, key aheadKey) (b []byte, ok bool) {
	a.mu.Lock()
	e, found := a.m[key]
	if found {
		delete(a.m, key)
	}
	a.mu.Unlock()
	if !found {
		return nil, false
	}
	release := func() {
		a.mu.Lock()
		a.used -= e.n
		a.mu.Unlock()
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		// The fetch runs on under the Dir's context: its bytes leave
		// the budget when it ends.
		go func() { <-e.done; release() }()
		return nil, false
	}
	release()
	return e.b, e.err == nil
}
