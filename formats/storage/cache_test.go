package storage

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestDiskCacheBudget: entries beyond the budget evict the least recently
// used, and a hit refreshes an entry's recency.
func TestDiskCacheBudget(t *testing.T) {
	dir := t.TempDir()
	c, err := openDiskCache(dir, 10<<10)
	if err != nil {
		t.Fatal(err)
	}
	blk := func(i int) Range { return Range{int64(i) << 12, 3 << 10} }
	for i := 0; i < 3; i++ {
		c.put("obj", blk(i), randomBytes(3<<10, uint64(i)))
		time.Sleep(10 * time.Millisecond) // distinct modification times
	}
	if _, ok := c.get("obj", blk(0)); !ok { // 0 becomes the most recent
		t.Fatal("entry 0 missing")
	}
	time.Sleep(10 * time.Millisecond)
	c.put("obj", blk(3), randomBytes(3<<10, 3)) // 12 KiB > 10 KiB: evict
	var total int64
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			info, _ := de.Info()
			total += info.Size()
		}
		return nil
	})
	if total > 10<<10 {
		t.Fatalf("cache holds %d bytes, budget %d", total, 10<<10)
	}
	if _, ok := c.get("obj", blk(1)); ok {
		t.Error("least recently used entry 1 survived")
	}
	for _, i := range []int{0, 3} {
		if b, ok := c.get("obj", blk(i)); !ok || !bytes.Equal(b, randomBytes(3<<10, uint64(i))) {
			t.Errorf("entry %d lost or wrong", i)
		}
	}
}

// TestDiskCacheSharedByProcesses: caches that share nothing but the
// directory (as processes do), writing and reading the same entries at
// once under a budget that forces evictions, only ever return an entry's
// exact bytes or a miss.
func TestDiskCacheSharedByProcesses(t *testing.T) {
	dir := t.TempDir()
	const entries, size = 24, 4 << 10
	payload := func(i int) []byte { return randomBytes(size, uint64(100+i)) }
	done := make(chan error)
	for p := 0; p < 4; p++ {
		go func(p int) {
			c, err := openDiskCache(dir, 12*size)
			if err != nil {
				done <- err
				return
			}
			for k := 0; k < 200; k++ {
				i := (k*7 + p*5) % entries
				r := Range{int64(i) * size, size}
				if b, ok := c.get("obj", r); ok {
					if !bytes.Equal(b, payload(i)) {
						done <- errors.New("a cache entry came back with other bytes")
						return
					}
				} else {
					c.put("obj", r, payload(i))
				}
			}
			done <- nil
		}(p)
	}
	for p := 0; p < 4; p++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
