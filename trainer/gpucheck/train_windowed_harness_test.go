package gpucheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/batchfault"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/internal/testenv/synthshards"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/remote"
	"github.com/segpipe/segpipe/trainer/device"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudatest"
	"github.com/segpipe/segpipe/trainer/train"
)

// serveShards serves the shards in dir as the shard set "synth" from a
// segpipe server on a loopback port and returns a client of it.
func serveShards(t *testing.T, dir string) *remote.Client {
	t.Helper()
	s, err := remote.NewServer(remote.ServerConfig{
		Open: func(_ context.Context, name string) (pipeline.Source, error) {
			if name != "synth" {
				return nil, os.ErrNotExist
			}
			return pipeline.OpenShards(dir) // the server closes it
		},
		Loader: pipeline.Config{Workers: 1},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	c, err := remote.NewClient(remote.ClientConfig{Addr: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// streamed is the shard set behind a server as train.Data: training
// streams windowed (OpenWindowed) or dense (Open), validation dense. The
// training streams' batches and the bytes their masks take on the device
// (the dense stack, or a 24-byte table entry a window and the windows'
// bytes) are counted in masks.
type streamed struct {
	c        *remote.Client
	images   int
	windowed bool
	masks    *maskCount
}

type maskCount struct {
	t       *testing.T
	batches int
	bytes   int64
}

func (d streamed) Images() int { return d.images }

func (d streamed) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	if cfg.Val {
		return d.c.Open(ctx, "synth", cfg)
	}
	var s *remote.Stream
	var err error
	if d.windowed {
		s, err = d.c.OpenWindowed(ctx, "synth", cfg)
	} else {
		s, err = d.c.Open(ctx, "synth", cfg)
	}
	if err != nil {
		return nil, err
	}
	return countedBatches{s, d.masks}, nil
}

type countedBatches struct {
	pipeline.Batches
	n *maskCount
}

func (b countedBatches) Next(ctx context.Context) (arrow.RecordBatch, error) {
	rec, err := b.Batches.Next(ctx)
	if err != nil {
		return nil, err
	}
	b.n.batches++
	if batch.IsWindowed(rec.Schema()) {
		mw, err := batch.MaskWindowsOf(rec)
		if err != nil {
			b.n.t.Fatal(err)
		}
		b.n.bytes += int64(cuda.WindowBytes*mw.Count() + len(mw.Data))
	} else {
		ms, err := batch.MaskStack(rec)
		if err != nil {
			b.n.t.Fatal(err)
		}
		b.n.bytes += int64(len(ms.Data))
	}
	return rec, nil
}

// trafficLog keeps the attributes of the run's "device traffic per
// iteration" log line.
type trafficLog struct {
	mu    sync.Mutex
	attrs map[string]int64
}

func (h *trafficLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *trafficLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *trafficLog) WithGroup(string) slog.Handler            { return h }
func (h *trafficLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "device traffic per iteration" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attrs = map[string]int64{}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindInt64 {
			h.attrs[a.Key] = a.Value.Int64()
		}
		return true
	})
	return nil
}

// TestWindowedTrainingOnHarness: on the CUDA Backend over the CPU harness,
// a training epoch whose batches arrive windowed from a segpipe server —
// the window table and the window bytes staged in place of the dense
// stack, expanded on the device — gives bit-identical loss items, mAPs
// and weights to the same epoch whose batches arrive dense (expanded on
// the host by the stream), and uploads the windows and their bytes
// instead of the dense stack: seven parts where the dense batch has six.
// A wrong expansion (a shifted or dropped window, a wrong table) changes
// the seg and semantic losses and the weights.
func TestWindowedTrainingOnHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("training iterations on the CPU harness take minutes")
	}
	dir, _ := synthshards.Write(t, synth.Config{Images: 4, Seed: 3, MaxSide: 96, MeanInstances: 2, Workers: 1})
	cl := serveShards(t, dir)
	info, err := cl.Dataset(context.Background(), "synth")
	if err != nil {
		t.Fatal(err)
	}
	cats := info.Categories
	cfg := harnessConfig()
	cfg.Device = "cuda"
	be := device.CUDA(cudatest.Harness(t))
	if !train.ExpandsWindows(be) {
		t.Fatal("the cuda Backend does not expand windows")
	}
	type result struct {
		sum     *train.Summary
		last    string
		traffic map[string]int64
		masks   *maskCount
	}
	runs := map[bool]result{}
	for _, windowed := range []bool{false, true} {
		out := t.TempDir()
		log := &trafficLog{}
		masks := &maskCount{t: t}
		sum, err := train.Run(context.Background(), train.Options{Config: cfg, Train: streamed{c: cl, images: 4, windowed: windowed, masks: masks},
			Categories: cats, Out: out, Backend: be, Logger: slog.New(log)})
		if err != nil {
			t.Fatalf("windowed %v: %v", windowed, err)
		}
		if log.attrs == nil {
			t.Fatalf("windowed %v: no traffic line logged", windowed)
		}
		runs[windowed] = result{sum, filepath.Join(out, train.LastFile), log.attrs, masks}
	}
	dense, win := runs[false], runs[true]
	g, w := win.sum.Epochs[0], dense.sum.Epochs[0]
	for k := range w.Loss {
		t.Logf("loss item %d: windowed %.9g, dense %.9g", k, g.Loss[k], w.Loss[k])
		if g.Loss[k] != w.Loss[k] {
			t.Errorf("loss item %d: windowed %.17g, dense %.17g", k, g.Loss[k], w.Loss[k])
		}
	}
	if g.BoxMAP != w.BoxMAP || g.MaskMAP != w.MaskMAP {
		t.Errorf("mAPs: windowed box %v mask %v, dense box %v mask %v", g.BoxMAP, g.MaskMAP, w.BoxMAP, w.MaskMAP)
	}
	fa, err := safetensors.ReadFile(dense.last)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := safetensors.ReadFile(win.last)
	if err != nil {
		t.Fatal(err)
	}
	for name, ta := range fa.Tensors {
		if tb, ok := fb.Tensors[name]; !ok || !bytes.Equal(ta.Data, tb.Data) {
			t.Errorf("last.safetensors: tensor %s differs", name)
		}
	}
	dt, wt := dense.traffic, win.traffic
	t.Logf("traffic per iteration: dense %d uploads / %d B, %d downloads / %d B; windowed %d uploads / %d B, %d downloads / %d B",
		dt["uploads"], dt["upload_bytes"], dt["downloads"], dt["download_bytes"], wt["uploads"], wt["upload_bytes"], wt["downloads"], wt["download_bytes"])
	if dt["uploads"] != 6 || wt["uploads"] != 7 {
		t.Errorf("uploads per iteration: dense %d, windowed %d; want 6 and 7 (the window table and bytes for the stack)", dt["uploads"], wt["uploads"])
	}
	perIter := func(m *maskCount) int64 { return m.bytes / int64(m.batches) }
	t.Logf("masks per iteration: dense stack %d B, window table + window bytes %d B (%d batches)", perIter(dense.masks), perIter(win.masks), win.masks.batches)
	// Both sides are per-iteration means in whole bytes: they may round
	// one byte apart.
	if d := wt["upload_bytes"] - dt["upload_bytes"] - (perIter(win.masks) - perIter(dense.masks)); d < -1 || d > 1 || wt["downloads"] != dt["downloads"] || wt["download_bytes"] != dt["download_bytes"] {
		t.Errorf("windowed traffic %v, dense %v: want the dense uploads with the table and window bytes for the stack, the same downloads", wt, dt)
	}
}

// windowedRecord is batchfault.Windowed, failing t on an error.
func windowedRecord(t *testing.T, rec arrow.RecordBatch, bad string) arrow.RecordBatch {
	t.Helper()
	win, err := batchfault.Windowed(rec, bad)
	if err != nil {
		t.Fatal(err)
	}
	return win
}

// brokenBatches yields a loader's batches in windowed form, broken as
// windowedRecord breaks them ("": not at all).
type brokenBatches struct {
	pipeline.Batches
	bad string
	t   *testing.T
}

func (b brokenBatches) Next(ctx context.Context) (arrow.RecordBatch, error) {
	rec, err := b.Batches.Next(ctx)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	return windowedRecord(b.t, rec, b.bad), nil
}

type brokenData struct {
	train.Data
	bad string
	t   *testing.T
}

// Open gives the training streams windowed; validation reads masks on the
// host from dense batches.
func (d brokenData) Open(ctx context.Context, cfg pipeline.Config) (pipeline.Batches, error) {
	l, err := d.Data.Open(ctx, cfg)
	if err != nil || cfg.Val {
		return l, err
	}
	return brokenBatches{l, d.bad, d.t}, nil
}

// TestWindowedRecordRefusedOnEveryBackend: a windowed batch whose window
// lies outside the grid, or whose data is a byte short of its windows,
// fails training with an error naming it on every backend — cpu and emu
// (which expand on the host) and cuda (which checks the windows building
// its device table) — never a panic; the same batches unbroken train.
func TestWindowedRecordRefusedOnEveryBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a model on each backend and trains an iteration")
	}
	src := synthShards(t, 2)
	cats := src.Manifest().Categories
	cfg := harnessConfig()
	harness := cudatest.Harness(t)
	for _, dev := range []string{"cpu", "emu", "cuda"} {
		var be *device.Device
		switch dev {
		case "cpu":
			be = device.Host(cpu.Default())
		case "emu":
			be = device.Host(cpu.NewEmulated())
		case "cuda":
			be = device.CUDA(harness)
		}
		for _, bad := range []struct{ name, want string }{{"window", "outside grid"}, {"data", "bytes"}} {
			t.Run(fmt.Sprintf("%s/%s", dev, bad.name), func(t *testing.T) {
				c := cfg
				c.Device = dev
				_, err := train.Run(context.Background(), train.Options{Config: c, Train: brokenData{train.Local(src), bad.name, t},
					Categories: cats, Out: t.TempDir(), Backend: be, StopAfterIterations: 1})
				if err == nil || !strings.Contains(err.Error(), bad.want) {
					t.Fatalf("training on a windowed batch with a bad %s: %v, want an error saying %q", bad.name, err, bad.want)
				}
				t.Logf("%v", err)
			})
		}
	}
	// The unbroken windowed form trains: an iteration on the CPU.
	c := cfg
	c.Device = "cpu"
	_, err := train.Run(context.Background(), train.Options{Config: c, Train: brokenData{train.Local(src), "", t},
		Categories: cats, Out: t.TempDir(), StopAfterIterations: 1})
	if err != nil && !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("a well-formed windowed batch: %v", err)
	}
}
