//go:build !nocloud

package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/testenv/s3test"
)

func openTestDir(t *testing.T, loc string, o Options) *Dir {
	t.Helper()
	d, err := Open(context.Background(), loc, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// TestBucketFiles: write, list, stat, read, check and remove against a
// real S3 server, and the same operations on a local directory.
func TestBucketFiles(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	ctx := context.Background()
	for _, loc := range []string{srv.URL("bkt", "a/b"), t.TempDir() + "/local"} {
		d := openTestDir(t, loc, Options{})
		if err := d.Mkdir(); err != nil {
			t.Fatal(err)
		}
		payload := randomBytes(3<<20+17, 1)
		if err := d.WriteFile(ctx, "part-00000.parquet", payload); err != nil {
			t.Fatalf("%s: %v", loc, err)
		}
		if err := d.WriteFile(ctx, "manifest.json", []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		// An aborted write leaves nothing.
		w, err := d.Create(ctx, "aborted.parquet")
		if err != nil {
			t.Fatal(err)
		}
		w.Write(payload[:1<<20])
		w.Abort()
		names, err := d.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"manifest.json", "part-00000.parquet"}; !slices.Equal(names, want) {
			t.Fatalf("%s: List = %q, want %q", loc, names, want)
		}
		if n, err := d.Stat(ctx, "part-00000.parquet"); err != nil || n != int64(len(payload)) {
			t.Fatalf("%s: Stat = %d, %v", loc, n, err)
		}
		if b, err := d.ReadFile(ctx, "manifest.json"); err != nil || string(b) != "{}\n" {
			t.Fatalf("%s: ReadFile = %q, %v", loc, b, err)
		}
		if err := d.Check(ctx, "part-00000.parquet", int64(len(payload)), sum(payload)); err != nil {
			t.Fatalf("%s: Check: %v", loc, err)
		}
		if err := d.Check(ctx, "part-00000.parquet", int64(len(payload)), sum(payload[1:])); err == nil || !strings.Contains(err.Error(), "sha256") {
			t.Fatalf("%s: Check of a wrong sum: %v", loc, err)
		}
		if err := d.Remove(ctx, "part-00000.parquet"); err != nil {
			t.Fatal(err)
		}
		if err := d.Remove(ctx, "part-00000.parquet"); err != nil {
			t.Fatalf("%s: removing a missing file: %v", loc, err)
		}
		_, err = d.Stat(ctx, "part-00000.parquet")
		if !errors.Is(err, ErrNotExist) {
			t.Fatalf("%s: Stat of a removed file: %v, want ErrNotExist", loc, err)
		}
	}
}

// TestBucketRangeReads: a File reads exactly the local bytes, through the
// tail, whole blocks with read-ahead, and plain ranges; with a cache, a
// second Dir (a restarted process) reads the blocks with the server down.
func TestBucketRangeReads(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	ctx := context.Background()
	payload := randomBytes(5<<20+123, 2)
	cacheDir := t.TempDir()
	loc := srv.URL("bkt", "ranges")
	if err := openTestDir(t, loc, Options{}).WriteFile(ctx, "obj", payload); err != nil {
		t.Fatal(err)
	}
	blocks := []Range{{100, 1 << 20}, {1<<20 + 100, 2 << 20}, {3<<20 + 100, 1<<20 + 50}}
	readAll := func(d *Dir) {
		t.Helper()
		f, err := d.OpenFile(ctx, "obj")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Size() != int64(len(payload)) {
			t.Fatalf("Size %d, want %d", f.Size(), len(payload))
		}
		f.SetBlocks(blocks)
		if end, _ := f.Seek(0, io.SeekEnd); end != int64(len(payload)) {
			t.Fatalf("Seek end = %d", end)
		}
		r := rand.New(rand.NewPCG(3, 3))
		for _, b := range blocks {
			for k := 0; k < 20; k++ {
				off := b.Off + r.Int64N(b.Len)
				n := min(r.Int64N(64<<10)+1, b.End()-off)
				got := make([]byte, n)
				if _, err := f.ReadAt(got, off); err != nil {
					t.Fatalf("ReadAt %d+%d: %v", off, n, err)
				}
				if !bytes.Equal(got, payload[off:off+n]) {
					t.Fatalf("ReadAt %d+%d: wrong bytes", off, n)
				}
			}
		}
		got := make([]byte, 1000)
		if n, err := f.ReadAt(got, int64(len(payload))-500); n != 500 || err != io.EOF || !bytes.Equal(got[:n], payload[len(payload)-500:]) {
			t.Fatalf("ReadAt past the end: %d, %v", n, err)
		}
		if _, err := f.ReadAt(got, 10); err != nil || !bytes.Equal(got, payload[10:1010]) {
			t.Fatalf("ReadAt outside the blocks: %v", err)
		}
	}
	readAll(openTestDir(t, loc, Options{CacheDir: cacheDir, CacheBytes: 64 << 20}))

	d := openTestDir(t, loc, Options{CacheDir: cacheDir, CacheBytes: 64 << 20, Retries: -1})
	f, err := d.OpenFile(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	f.SetBlocks(blocks)
	srv.Stop()
	for _, b := range blocks {
		got := make([]byte, b.Len)
		if _, err := f.ReadAt(got, b.Off); err != nil || !bytes.Equal(got, payload[b.Off:b.End()]) {
			t.Fatalf("block %+v from the cache with the server down: %v", b, err)
		}
	}
}

// TestBucketServerRestartMidRead: the server dies between two blocks and
// comes back; the read retries and returns the right bytes.
func TestBucketServerRestartMidRead(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	ctx := context.Background()
	payload := randomBytes(3<<20, 4)
	loc := srv.URL("bkt", "restart")
	d := openTestDir(t, loc, Options{ReadAheadBytes: -1, RetryDelay: 50 * time.Millisecond})
	if err := d.WriteFile(ctx, "obj", payload); err != nil {
		t.Fatal(err)
	}
	f, err := d.OpenFile(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	blocks := []Range{{0, 1 << 20}, {1 << 20, 1 << 20}}
	f.SetBlocks(blocks)
	got := make([]byte, 1<<20)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, payload[:1<<20]) {
		t.Fatalf("first block: %v", err)
	}
	srv.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(700 * time.Millisecond)
		srv.Restart()
	}()
	_, err = f.ReadAt(got, 1<<20)
	<-done
	if err != nil || !bytes.Equal(got, payload[1<<20:2<<20]) {
		t.Fatalf("block read across a server restart: %v", err)
	}
}

// TestBucketErrorsNameObjectAndRange: a missing object fails at once and
// says which; a server that stays down fails after the retries, naming
// the object and the byte range.
func TestBucketErrorsNameObjectAndRange(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	ctx := context.Background()
	loc := srv.URL("bkt", "errs")
	d := openTestDir(t, loc, Options{ReadAheadBytes: -1, Retries: 2, RetryDelay: 10 * time.Millisecond})
	t0 := time.Now()
	_, err := d.OpenFile(ctx, "missing.parquet")
	if !errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), "s3://bkt/errs/missing.parquet") {
		t.Fatalf("missing object: %v", err)
	}
	if time.Since(t0) > 5*time.Second {
		t.Errorf("a missing object took %v: not-found must not be retried", time.Since(t0))
	}
	if err := d.WriteFile(ctx, "obj", randomBytes(1<<20, 5)); err != nil {
		t.Fatal(err)
	}
	f, err := d.OpenFile(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = f.ReadAt(make([]byte, 1000), 5)
	if err == nil || !strings.Contains(err.Error(), "s3://bkt/errs/obj bytes 5-1004 (3 attempts)") {
		t.Fatalf("read with the server down: %v", err)
	}
}

// TestBucketKilledUpload: a process killed while uploading (here the server
// dies mid-upload and the writer never commits) leaves no object; a new
// upload of the same name then succeeds.
func TestBucketKilledUpload(t *testing.T) {
	srv := s3test.Start(t, "bkt")
	ctx := context.Background()
	loc := srv.URL("bkt", "killed")
	d := openTestDir(t, loc, Options{Retries: -1})
	w, err := d.Create(ctx, "part-00000.parquet")
	if err != nil {
		t.Fatal(err)
	}
	payload := randomBytes(12<<20, 6) // larger than one upload part
	w.Write(payload[:8<<20])
	srv.Stop()
	w.Write(payload[8<<20:])
	srv.Restart()
	if _, err := d.Stat(ctx, "part-00000.parquet"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("an uncommitted upload is visible: %v", err)
	}
	w.Abort()
	if err := d.WriteFile(ctx, "part-00000.parquet", payload); err != nil {
		t.Fatal(err)
	}
	if err := d.Check(ctx, "part-00000.parquet", int64(len(payload)), sum(payload)); err != nil {
		t.Fatal(err)
	}
}
