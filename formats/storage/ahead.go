package storage

import "sync"

// aheadPool holds ranges fetched ahead of their reader, bounded in bytes
// (in flight and held together). An entry is handed over once, to the
// reader that takes it; entries never taken are dropped oldest first when
// a new fetch needs their room.
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
}

const aheadFetches = 4

func newAheadPool(budget int64) *aheadPool {
	return &aheadPool{budget: budget, m: map[aheadKey]*aheadEntry{}, slots: make(chan struct{}, aheadFetches)}
}

// start fetches key in the background unless it is already there or the
// budget (after dropping finished, untaken entries) has no room for n.
func (a *aheadPool) start(key aheadKey, n int64, fetch func() ([]byte, error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.m[key]; ok || n > a.budget {
		return
	}
	for a.used+n > a.budget {
		if !a.dropOldestLocked() {
			return
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
		close(e.done)
	}()
}

func (a *aheadPool) dropOldestLocked() bool {
	var oldest aheadKey
	var oe *aheadEntry
	for k, e := range a.m {
		select {
		case <-e.done:
		default:
			continue // in flight: it cannot be dropped
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

// take hands over key's bytes, waiting for its fetch if in flight. ok is
// false when the key was never started, was dropped, or failed (the
// caller then reads it itself and gets the error with its context).
func (a *aheadPool) take(key aheadKey) (b []byte, ok bool) {
	a.mu.Lock()
	e, found := a.m[key]
	if found {
		delete(a.m, key)
	}
	a.mu.Unlock()
	if !found {
		return nil, false
	}
	<-e.done
	a.mu.Lock()
	a.used -= e.n
	a.mu.Unlock()
	return e.b, e.err == nil
}
