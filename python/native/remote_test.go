//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// serveShards runs a segpipe server over the shard set dir's parent and
// returns its address and the set's name there.
func serveShards(t *testing.T, dir string) (addr, set string) {
	t.Helper()
	srv, err := remote.NewServer(remote.ServerConfig{Root: filepath.Dir(dir), Logger: slog.New(slog.DiscardHandler),
		Loader: pipeline.Config{Workers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), filepath.Base(dir)
}

// tracking records the C allocations that are live, to tell whether a
// buffer lies in one.
type tracking struct {
	memory.Allocator
	mu   sync.Mutex
	live map[uintptr]int
}

func (a *tracking) Allocate(n int) []byte {
	b := a.Allocator.Allocate(n)
	a.mu.Lock()
	a.live[uintptr(unsafe.Pointer(unsafe.SliceData(b)))] = len(b)
	a.mu.Unlock()
	return b
}

func (a *tracking) Reallocate(n int, b []byte) []byte {
	a.mu.Lock()
	delete(a.live, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	a.mu.Unlock()
	b = a.Allocator.Reallocate(n, b)
	a.mu.Lock()
	a.live[uintptr(unsafe.Pointer(unsafe.SliceData(b)))] = len(b)
	a.mu.Unlock()
	return b
}

func (a *tracking) Free(b []byte) {
	a.mu.Lock()
	delete(a.live, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	a.mu.Unlock()
	a.Allocator.Free(b)
}

func (a *tracking) holds(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for base, n := range a.live {
		if p >= base && p+uintptr(len(b)) <= base+uintptr(n) {
			return true
		}
	}
	return false
}

// outside returns the first buffer of d, at any depth, that is not in
// memory from a.
func (a *tracking) outside(d arrow.ArrayData) string {
	for i, b := range d.Buffers() {
		if b != nil && !a.holds(b.Bytes()) {
			return fmt.Sprintf("buffer %d (%d bytes)", i, b.Len())
		}
	}
	for i, c := range d.Children() {
		if w := a.outside(c); w != "" {
			return fmt.Sprintf("child %d %s", i, w)
		}
	}
	return ""
}

// TestRemoteStreamIsTheServersStream: with options "remote" the library
// streams a server's batches, byte for byte what the server sends (masks
// as they travel, windowed ones windowed) with the same resume states as
// the Go client's, every buffer in the caller's C memory (cgo's pointer
// rules: C keeps them after the call), all of it given back once the
// batches and the stream are released.
func TestRemoteStreamIsTheServersStream(t *testing.T) {
	dir := shards(t, 24)
	addr, set := serveShards(t, dir)
	for _, masks := range []string{"dense", "windowed"} {
		t.Run(masks, func(t *testing.T) {
			req := request(set, fmt.Sprintf(`,"masks":%q,"start":{"seed":3},"epochs":2`, masks))
			mem := &tracking{Allocator: checked(), live: map[uintptr]int{}}
			s := openStream(t, req, fmt.Sprintf(`{"remote":{"addr":%q}}`, addr), mem)
			got, states := s.read(t, -1)

			r, err := remote.ParseRequest([]byte(req))
			if err != nil {
				t.Fatal(err)
			}
			c, err := remote.NewClient(remote.ClientConfig{Addr: addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			st, err := c.StreamAsSent(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			var want []arrow.RecordBatch
			var wantStates []order.State
			for {
				rec, err := st.Next(context.Background())
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, rec)
				wantStates = append(wantStates, st.State())
			}
			st.Close()
			defer release(want)

			if len(got) != len(want) || len(got) < 6 {
				t.Fatalf("%d batches through the library, %d from the Go client", len(got), len(want))
			}
			if string(ipcBytes(t, got)) != string(ipcBytes(t, want)) {
				t.Error("the library's batches differ from the Go client's")
			}
			for i := range states {
				if states[i] != wantStates[i] {
					t.Errorf("state after batch %d: %+v, the Go client's %+v", i, states[i], wantStates[i])
				}
			}
			for i, rec := range got {
				for j, col := range rec.Columns() {
					if w := mem.outside(col.Data()); w != "" {
						t.Fatalf("batch %d column %s: %s is not in the caller's C memory", i, rec.Schema().Field(j).Name, w)
					}
				}
			}
			release(got)
			s.rdr.Release()
			closeHandle(s.h)
			deadline := time.Now().Add(10 * time.Second)
			for mem.Allocator.(*memory.CheckedAllocator).CurrentAlloc() != 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // gRPC puts a cancelled stream's frames back on its own time
			}
			assertAllBack(t, mem.Allocator.(*memory.CheckedAllocator))
		})
	}
}

// TestRemoteRefusals: what the library refuses about a remote stream, and
// how a server that is not there fails: within the timeout, naming it.
func TestRemoteRefusals(t *testing.T) {
	dir := shards(t, 8)
	addr, set := serveShards(t, dir)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := lis.Addr().String() // accepts connections, never answers
	defer lis.Close()
	for _, tc := range []struct {
		name, req, opts, want string
	}{
		{"local options", request(set, ""), fmt.Sprintf(`{"workers":2,"remote":{"addr":%q}}`, addr), "with remote the server decides them"},
		{"no address", request(set, ""), `{"remote":{}}`, "remote.addr"},
		{"negative timeout", request(set, ""), fmt.Sprintf(`{"remote":{"addr":%q,"timeout":-1}}`, addr), "remote.timeout"},
		{"roots without tls", request(set, ""), fmt.Sprintf(`{"remote":{"addr":%q,"tls_roots":"x"}}`, addr), "without remote.tls"},
		{"unknown key", request(set, ""), fmt.Sprintf(`{"remote":{"addr":%q,"port":1}}`, addr), "unknown field"},
		{"a path, not a set name", request(dir, ""), fmt.Sprintf(`{"remote":{"addr":%q}}`, addr), "shards"},
		{"unknown set", request("nope", ""), fmt.Sprintf(`{"remote":{"addr":%q}}`, addr), "nope"},
		{"silent server", request(set, ""), fmt.Sprintf(`{"remote":{"addr":%q,"timeout":0.5,"retries":0}}`, silent), "within 500ms (timeout)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newCStream()
			defer freeCStream(cs)
			start := time.Now()
			_, err := openHandle([]byte(tc.req), []byte(tc.opts), cs, checked())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("refused after %v", d)
			}
			if errors.Is(err, context.Canceled) {
				t.Errorf("a refusal as a cancellation: %v", err)
			}
		})
	}
}

// TestRemoteClientErrorsAreNotKept: a client that could not be made (an
// address list with an entry that is no host:port) is not kept for the
// next open to find.
func TestRemoteClientErrorsAreNotKept(t *testing.T) {
	closeIdlePools()
	cs := newCStream()
	defer freeCStream(cs)
	_, err := openHandle([]byte(request("synth", "")), []byte(`{"remote":{"addr":"127.0.0.1:1,no-port"}}`), cs, checked())
	if err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Fatalf("got %v, want the address list refused", err)
	}
	if n := clients.len(); n != 0 {
		t.Errorf("%d clients kept after a failed open, want 0", n)
	}
}
