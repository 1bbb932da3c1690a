package pipeline

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/shard"
)

// writeShards writes rows as a shard set of several row groups and opens it.
func writeShards(t *testing.T, rows []shard.Image) *ShardSource {
	t.Helper()
	dir := t.TempDir()
	w, err := shard.Create(dir, shard.WriterOptions{RowGroupBytes: 20 << 10, Categories: []shard.Category{{ID: 1, Index: 0, Name: "a"}, {ID: 2, Index: 1, Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// ipcBytes is the Arrow IPC stream of recs: equal bytes, equal batches.
func ipcBytes(t *testing.T, recs []arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(recs[0].Schema()))
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAllocatorGetsEveryBufferBack(t *testing.T) {
	src := writeShards(t, synth(t, 30, 5))
	cfg := testConfig()
	want := run(t, src, cfg, -1) // the Go heap
	defer want.release()
	wantBytes := ipcBytes(t, want.recs)

	tests := []struct {
		name string
		// keep is how many batches to take (-1: all); heldAfterClose
		// releases them only after Close.
		keep           int
		heldAfterClose bool
	}{
		{"every batch, released before Close", -1, false},
		{"every batch, released after Close", -1, true},
		{"stopped early with batches in flight, released after Close", 2, true},
		{"stopped early, released before Close", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			c := cfg
			c.Allocator = mem
			l, err := New(context.Background(), src, c)
			if err != nil {
				t.Fatal(err)
			}
			var recs []arrow.RecordBatch
			for rec, err := range l.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, rec)
				if len(recs) == tc.keep {
					break
				}
			}
			n := len(want.recs)
			if tc.keep > 0 {
				n = tc.keep
			}
			if got := ipcBytes(t, recs); !bytes.Equal(got, ipcBytes(t, want.recs[:n])) {
				t.Error("batches differ from the Go-heap run")
			} else if tc.keep < 0 && !bytes.Equal(got, wantBytes) {
				t.Error("whole run differs from the Go-heap run")
			}
			if mem.CurrentAlloc() == 0 {
				t.Fatal("nothing came from Config.Allocator")
			}
			release := func() {
				for _, r := range recs {
					r.Release()
				}
			}
			if !tc.heldAfterClose {
				release()
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.heldAfterClose {
				if mem.CurrentAlloc() == 0 {
					t.Fatal("records held after Close lost their buffers")
				}
				if got := ipcBytes(t, recs); !bytes.Equal(got, ipcBytes(t, want.recs[:n])) {
					t.Error("records held across Close changed")
				}
				release()
			}
			mem.AssertSize(t, 0)
		})
	}
}
