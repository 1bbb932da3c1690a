package cuda

import (
	"testing"
)

// checkFetch is Fetch's contract on any engine: the copy is queued behind
// the work before it and returns; Wait gives the values as they were when
// the copy was queued (not after the work queued since), counts one
// download and returns the slot for the next fetch; reading twice or into
// the wrong length is an error, not a panic; a fetch still on its way
// when the backend closes is dropped cleanly. queued runs between the
// first Fetch and its Wait, read right after that Wait.
func checkFetch(t *testing.T, be *Backend, queued, read func()) {
	t.Helper()
	buf := be.Alloc(1 << 20)
	be.Fill(buf, 2.5)
	t0 := be.Transfers()
	f, err := be.Fetch(buf.Slice(0, 12))
	if err != nil {
		t.Fatal(err)
	}
	be.Fill(buf, 7) // queued after the fetch: not what it reads
	if d := t0.Since(be.Transfers()); d.Downloads != 1 || d.DownloadBytes != 48 || d.Syncs != 0 {
		t.Errorf("Fetch moved %+v, want one download of 48 bytes and no sync", d)
	}
	queued()
	got := make([]float32, 12)
	if err := f.Wait(got); err != nil {
		t.Fatal(err)
	}
	read()
	for i, v := range got {
		if v != 2.5 {
			t.Fatalf("fetched value %d = %v, want 2.5 (the value when the copy was queued)", i, v)
		}
	}
	if err := f.Wait(got); err == nil {
		t.Error("a second Wait succeeded")
	}
	if len(be.fetching.free) != 1 {
		t.Fatalf("%d free fetch slots after a read, want 1", len(be.fetching.free))
	}
	g, err := be.Fetch(buf.Slice(0, 4))
	if err != nil {
		t.Fatal(err)
	}
	if len(be.fetching.free) != 0 {
		t.Error("a second fetch did not reuse the slot")
	}
	if err := g.Wait(make([]float32, 5)); err == nil {
		t.Error("a Wait into 5 values of a 4-value fetch succeeded")
	}
	if _, err := be.Fetch(buf); err != nil {
		t.Fatal(err)
	}
}

// TestFetchOnHarness: checkFetch, and what the harness's trace shows of
// the order a GPU relies on: the copy queued behind every launch before
// it, and Wait waiting on that copy's event, never synchronising the
// streams.
func TestFetchOnHarness(t *testing.T) {
	be, e := newHarnessBackend(t)
	var down, n int
	checkFetch(t, be, func() {
		down, n = lastOp(e.stage, "down"), len(e.stage)
		if down < 0 {
			t.Fatal("Fetch queued no copy")
		}
		if e.stage[down].launches != e.launches-1 { // the Fill after it
			t.Errorf("the copy was queued after %d launches, want behind all %d before it", e.stage[down].launches, e.launches-1)
		}
	}, func() {
		w := lastOp(e.stage, "wait")
		if w < n || e.stage[w].event != e.stage[down].event {
			t.Errorf("Wait waited on trace entry %d, want on the copy's event %d", w, e.stage[down].event)
		}
		for _, s := range e.stage[n:] {
			if s.op == "sync" {
				t.Error("Wait synchronised the streams instead of waiting for its copy")
			}
		}
	})
}

// TestFetchOnGPU: checkFetch on a GPU, a megabyte of fills queued behind
// the copy before it is read.
func TestFetchOnGPU(t *testing.T) {
	checkFetch(t, openGPUBackend(t), func() {}, func() {})
}
