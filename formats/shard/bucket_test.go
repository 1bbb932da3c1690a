//go:build !nocloud

package shard

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/segpipe/segpipe/internal/testenv/s3test"
)

// TestBucketReadsRowGroupsByRange: a shard set written to a bucket holds
// the bytes of a local one; opening a shard fetches its footer in one
// ranged request, and each row group at most one more (none if the
// footer's tail holds it), never a whole-object download; rows read back equal the local ones.
func TestBucketReadsRowGroupsByRange(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	url, count := srv.Proxy("bkt", "set")
	imgs := testImages(11, 60)
	for i := range imgs {
		imgs[i].Bytes = bytes.Repeat([]byte{byte(i)}, 12000+i*100)
	}
	opts := WriterOptions{ShardBytes: 512 << 10, RowGroupBytes: 64 << 10}
	local := t.TempDir()
	writeAll(t, local, opts, imgs, -1)
	writeAll(t, url, opts, imgs, -1)
	want := readDir(t, local)
	got := readDir(t, srv.Dir("bkt", "set"))
	if len(got) != len(want) {
		t.Fatalf("bucket holds %d objects, local directory %d files", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(b, got[name]) {
			t.Errorf("object %s differs from the local file", name)
		}
	}

	set, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	lset, err := Open(local)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Verify(context.Background()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	for i, info := range set.Manifest.Shards {
		count.Reset()
		r, err := set.OpenShard(i, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gets, ranged, _ := count.Gets(); gets != 1 || ranged != 1 {
			t.Fatalf("shard %s: opening took %d GETs (%d ranged), want the footer's one", info.File, gets, ranged)
		}
		if r.NumRowGroups() < 2 {
			t.Fatalf("shard %s: %d row groups, want several", info.File, r.NumRowGroups())
		}
		lr, err := lset.OpenShard(i, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for g := 0; g < r.NumRowGroups(); g++ {
			rec, err := r.ReadRowGroup(context.Background(), g)
			if err != nil {
				t.Fatal(err)
			}
			lrec, err := lr.ReadRowGroup(context.Background(), g)
			if err != nil {
				t.Fatal(err)
			}
			if !array.RecordEqual(rec, lrec) {
				t.Errorf("shard %s row group %d differs from the local read", info.File, g)
			}
			rec.Release()
			lrec.Release()
		}
		r.Close()
		lr.Close()
		gets, ranged, n := count.Gets()
		// Row groups inside the footer's 64 KiB tail need no request.
		if gets < 2 || gets > 1+r.NumRowGroups() || ranged != gets {
			t.Errorf("shard %s: %d GETs (%d ranged) for %d row groups, want at most one each plus the footer", info.File, gets, ranged, r.NumRowGroups())
		}
		if n > info.Bytes+64<<10 {
			t.Errorf("shard %s: fetched %d bytes of a %d-byte object", info.File, n, info.Bytes)
		}
		// Reading every column fetches whole row groups, the ranges a
		// loader schedules (RowGroupRange): they must be the same keys.
		blocks := columnRanges(lr.pf, lr.leaves)
		if len(blocks) != lr.NumRowGroups() {
			t.Fatalf("shard %s: %d blocks for %d row groups", info.File, len(blocks), lr.NumRowGroups())
		}
		for g, b := range blocks {
			if b != lr.RowGroupRange(g) {
				t.Errorf("shard %s row group %d: block %+v, RowGroupRange %+v", info.File, g, b, lr.RowGroupRange(g))
			}
		}

		// An annotation-only read leaves the image bytes in the bucket.
		count.Reset()
		ar, err := set.OpenShard(i, ReadOptions{Columns: []string{ColImageID, ColInstances}})
		if err != nil {
			t.Fatal(err)
		}
		for g := 0; g < ar.NumRowGroups(); g++ {
			rec, err := ar.ReadRowGroup(context.Background(), g)
			if err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		ar.Close()
		if _, _, n := count.Gets(); n > 64<<10+info.Bytes/4 {
			t.Errorf("shard %s: an annotation-only read fetched %d bytes of %d", info.File, n, info.Bytes)
		}
	}
}

// TestBucketStalledReadEndsWithContext: a bucket that stops answering in
// the middle of a read holds a row group read only as long as its
// caller's context, not until the storage layer's retries run out; the
// reader then reads on once the bucket answers again.
func TestBucketStalledReadEndsWithContext(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	url, stall := srv.Proxy("bkt", "set")
	imgs := testImages(6, 60)
	for i := range imgs {
		imgs[i].Bytes = bytes.Repeat([]byte{byte(i)}, 12000)
	}
	writeAll(t, url, WriterOptions{ShardBytes: 512 << 10, RowGroupBytes: 32 << 10}, imgs, -1)
	set, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	r, err := set.OpenShard(0, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	last := r.NumRowGroups() - 1 // the first may sit in the footer's tail
	stall.Stall(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		rec, err := r.ReadRowGroup(ctx, 0)
		if err == nil {
			rec.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stalled read ended with %v, want the context's deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a stalled read outlived its context by a minute")
	}
	stall.Stall(false)
	rec, err := r.ReadRowGroup(context.Background(), last)
	if err != nil {
		t.Fatalf("read after the stall: %v", err)
	}
	rec.Release()
}

// TestBucketStalledOpenEndsWithContext: opening a shard (its footer, a
// ranged read) of a bucket that stopped answering ends with the caller's
// context.
func TestBucketStalledOpenEndsWithContext(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	url, stall := srv.Proxy("bkt", "set")
	writeAll(t, url, WriterOptions{}, testImages(3, 60), -1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	set, err := OpenContext(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	stall.Stall(true)
	done := make(chan error, 1)
	go func() {
		r, err := set.OpenShardContext(ctx, 0, ReadOptions{})
		if err == nil {
			r.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stalled open ended with %v, want the context's deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a stalled open outlived its context by a minute")
	}
}
