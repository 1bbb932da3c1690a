package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/remote"
)

// miniShards converts a small synthetic COCO set and returns the shard dir.
func miniShards(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 12)
	out := filepath.Join(tmp, "shards", "mini")
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", out); code != ExitOK {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	return out
}

func TestDumpWritesReadableStream(t *testing.T) {
	dir := miniShards(t)
	out := filepath.Join(t.TempDir(), "b.arrows")
	sumPath := out + ".json"
	code, stdout, errs := run(t, "dump", "--shards", dir, "--batches", "2", "--batch", "4", "--imgsz", "64", "--out", out, "--summary", sumPath)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "wrote 2 batches") {
		t.Errorf("stdout: %s", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ipc.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var sum dumpSummary
	b, _ := os.ReadFile(sumPath)
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		rec := r.RecordBatch()
		ms, err := batch.MaskStack(rec)
		if err != nil {
			t.Fatal(err)
		}
		if ms.Count != sum.Batches[n].Instances || rec.NumRows() != sum.Batches[n].Rows {
			t.Errorf("batch %d: %d rows %d masks, summary %+v", n, rec.NumRows(), ms.Count, sum.Batches[n])
		}
		if p := sum.Probe; p != nil && p.Batch == n && ms.At(p.Instance)[p.Row*ms.Shape[1]+p.Col] != p.Value {
			t.Errorf("probe %+v does not match the file", p)
		}
		n++
	}
	if r.Err() != nil || n != 2 {
		t.Fatalf("%d batches read, err %v", n, r.Err())
	}
}

func TestPreviewWritesSheets(t *testing.T) {
	dir := miniShards(t)
	tmp := t.TempDir()
	out, grid := filepath.Join(tmp, "p.png"), filepath.Join(tmp, "g.png")
	code, _, errs := run(t, "preview", "--shards", dir, "--batch", "4", "--imgsz", "64", "--tile", "100", "--out", out, "--grid-out", grid)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, p := range []string{out, grid} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		im, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		// 2×2 tiles of 100 px with 6 px gaps.
		if b := im.Bounds(); b.Dx() != 6+2*106 || b.Dy() != 6+2*106 {
			t.Errorf("%s is %v", p, b)
		}
	}
	if code, _, _ := run(t, "preview", "--shards", dir, "--out", out, "--tile", "3"); code != ExitUsage {
		t.Errorf("--tile 3: exit %d, want usage", code)
	}
}

func TestServeRefusesUnsafeSettings(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "0.0.0.0:0"}, "loopback"},
		{[]string{"--tls-cert", "c.pem"}, "go together"},
		{[]string{"--workers", "-1"}, "negative"},
	} {
		code, _, errs := run(t, append([]string{"serve", "--shards", dir}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %s", tc.args, code, errs)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveShards runs `segpipe serve` over the shard root holding dir on a
// loopback port with token tk; it returns the address and a stop function
// that checks the server exits cleanly on cancellation.
func serveShards(t *testing.T, dir string, workers int) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"segpipe", "--log-level", "warn", "serve", "--shards", filepath.Dir(dir), "--addr", "127.0.0.1:0", "--token", "tk", "--workers", strconv.Itoa(workers)}, &out, &errb)
	}()
	t.Cleanup(cancel) // waitAddr fails the test if the server does not start
	addr = waitAddr(t, &out, &errb)
	return addr, func() {
		cancel()
		select {
		case code := <-done:
			if code != ExitOK {
				t.Errorf("serve exit %d: %s", code, errb.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatal("serve did not stop on cancellation")
		}
	}
}

func TestServeStreamsToClient(t *testing.T) {
	dir := miniShards(t)
	addr, stop := serveShards(t, dir, 1)
	ctx := context.Background()
	c, err := remote.NewClient(remote.ClientConfig{Addr: addr, Token: "tk"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Stream(ctx, remote.Request{Shards: "mini", BatchSize: 4, ImgSz: 64, Limit: 2, Masks: remote.MasksWindowed})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		rec, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec.NumRows() != 4 {
			t.Errorf("batch %d has %d rows", i, rec.NumRows())
		}
		rec.Release()
	}
	s.Close()
	stop()
}

// Issue 16: batch 64 at imgsz 16384 made dump (and serve) die with a
// runtime out-of-memory fatal error; the estimate refuses it as a usage
// error before allocating.
func TestLocalCommandsRefuseWhatDoesNotFit(t *testing.T) {
	dir := miniShards(t)
	for _, args := range [][]string{
		{"dump", "--shards", dir, "--batch", "64", "--imgsz", "16384", "--out", filepath.Join(t.TempDir(), "x.arrows")},
		{"bench", "--shards", dir, "--batch", "64", "--imgsz", "16384"},
	} {
		code, out, errs := run(t, args...)
		if code != ExitUsage || !strings.Contains(errs, "memory limit") || !strings.Contains(errs, "imgsz 16384") {
			t.Errorf("%s: exit %d, want %d with the estimate named\n%s%s", args[0], code, ExitUsage, out, errs)
		}
	}
}
