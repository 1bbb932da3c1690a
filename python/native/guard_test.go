//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestForkedChildNeverCallsGo: in a process that is not the one that
// loaded the library (a fork), the stream's get_next fails with ECHILD
// and a release of a batch or of the stream returns without calling Go:
// what it would free stays allocated (leaked, as the child's exit leaves
// it), where the same release in the owner frees it.
func TestForkedChildNeverCallsGo(t *testing.T) {
	dir := shards(t, 16)
	req := request(dir, "")
	for _, tc := range []struct {
		name  string
		child bool
	}{{"owner frees", false}, {"forked child leaks", true}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := checked()
			s := openStream(t, req, "", mem)
			recs, _ := s.read(t, 1)
			restore := actAsFork(tc.child)
			release(recs)
			_, err := s.rdr.Read()
			s.rdr.Release()
			restore()
			callClose(s.h)
			closeIdlePools()
			if tc.child {
				if err == nil || !strings.Contains(err.Error(), "fork") {
					t.Errorf("get_next in a forked child: %v, want the fork error", err)
				}
				if mem.CurrentAlloc() == 0 {
					t.Error("a release in a forked child freed the batch: it called into Go")
				}
				return
			}
			if err != nil {
				t.Errorf("get_next in the owner: %v", err)
			}
			mem.AssertSize(t, 0)
		})
	}
}

// TestPathsToOneSetShareOneCache: a shard set opened by different paths
// (relative, trailing slash, dot, a symbolic link, absolute) has one
// decoded-image cache, and once every session on it is closed the cache
// is dropped after poolIdle.
func TestPathsToOneSetShareOneCache(t *testing.T) {
	dir := shards(t, 8)
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(abs, link); err != nil {
		t.Skip("no symbolic links:", err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, abs)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{abs, abs + "/", link, rel, "./" + rel, "file://" + abs}
	closeIdlePools()
	before := caches.len()
	mem := checked()
	var open []*stream
	for _, p := range paths {
		s := openStream(t, request(p, ""), "", mem)
		recs, _ := s.read(t, 1)
		release(recs)
		open = append(open, s)
	}
	if n := caches.len() - before; n != 1 {
		t.Errorf("%d caches for %d paths to one set, want 1", n, len(paths))
	}
	old := poolIdle
	poolIdle = 10 * time.Millisecond
	defer func() { poolIdle = old }()
	for _, s := range open {
		s.rdr.Release()
		callClose(s.h)
	}
	deadline := time.Now().Add(5 * time.Second)
	for caches.len() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := caches.len() - before; n != 0 {
		t.Errorf("%d caches left after every session closed, want 0", n)
	}
	assertAllBack(t, mem)
}

// TestOptionsRefuseNegatives: max_memory -1 lifts the budget, 0 is the
// default; any other negative is refused by name (negative counts are the
// pipeline's to refuse, TestOpenRefusals).
func TestOptionsRefuseNegatives(t *testing.T) {
	for _, tc := range []struct {
		opts, refused string
	}{
		{`{"max_memory":-1}`, ""},
		{`{"max_memory":0}`, ""},
		{`{"max_memory":1073741824}`, ""},
		{`{"max_memory":-5}`, "max_memory -5"},
		{`{"max_memory":-2}`, "max_memory -2"},
	} {
		_, err := parseOptions([]byte(tc.opts))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v", tc.opts, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want an error naming %q", tc.opts, err, tc.refused)
		}
	}
}
