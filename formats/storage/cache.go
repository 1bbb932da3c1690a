package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// diskCache keeps fetched ranges as files named for the object's identity
// and the range: DIR/ab/abcdef…-OFF-LEN. Every entry is written atomically
// and never changed, so processes sharing the directory see an entry
// whole or not at all; a reader whose entry was just evicted by another
// process sees a miss. Recency is the file's modification time, touched on
// every hit.
type diskCache struct {
	dir    string
	budget int64

	mu   sync.Mutex
	used int64 // this process's estimate; an eviction pass recounts it
}

// staleTemp is the age after which an atomicfile temporary in the cache is
// the leftover of a killed process rather than a write in progress.
const staleTemp = time.Hour

func openDiskCache(dir string, budget int64) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	c := &diskCache{dir: dir, budget: budget}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

func (c *diskCache) path(ident string, r Range) string {
	h := sha256.Sum256([]byte(ident))
	x := hex.EncodeToString(h[:16])
	return filepath.Join(c.dir, x[:2], fmt.Sprintf("%s-%d-%d", x, r.Off, r.Len))
}

func (c *diskCache) get(ident string, r Range) ([]byte, bool) {
	p := c.path(ident, r)
	b, err := os.ReadFile(p)
	if err != nil || int64(len(b)) != r.Len {
		return nil, false
	}
	now := time.Now()
	os.Chtimes(p, now, now)
	return b, true
}

// put stores b; a failure (a full disk) only costs a later miss.
func (c *diskCache) put(ident string, r Range, b []byte) {
	if int64(len(b)) > c.budget {
		return
	}
	p := c.path(ident, r)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		slog.Warn("cache write failed", "path", p, "reason", err.Error())
		return
	}
	if err := atomicfile.WriteFile(p, b, 0o644); err != nil {
		slog.Warn("cache write failed", "path", p, "reason", err.Error())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used += int64(len(b))
	if c.used > c.budget {
		c.evictLocked()
	}
}

// evictLocked recounts the cache and removes the least recently used
// entries until it is at 90% of its budget, so that passes are rare.
func (c *diskCache) evictLocked() {
	type entry struct {
		path string
		size int64
		mod  time.Time
	}
	var entries []entry
	var total int64
	filepath.WalkDir(c.dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		info, err := de.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(de.Name(), ".") {
			if time.Since(info.ModTime()) > staleTemp {
				os.Remove(p)
			}
			return nil
		}
		entries = append(entries, entry{p, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	if total > c.budget {
		sort.Slice(entries, func(i, j int) bool { return entries[i].mod.Before(entries[j].mod) })
		target := c.budget - c.budget/10
		for _, e := range entries {
			if total <= target {
				break
			}
			if err := os.Remove(e.path); err == nil || os.IsNotExist(err) {
				total -= e.size
			}
		}
	}
	c.used = total
}
