package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// started approximates the process's start: package variables are set
// before main runs, after the runtime has started.
var started = time.Now()

// loaderMain streams training batches from a shard set in this process, as
// `segpipe bench` does, and records what grows with the dataset: the time
// to open the set and to the first batch, CPU per image over the batches
// streamed, peak RSS, the bytes one epoch's order takes, and the size of
// the resume state. With --consume C the loader starts mid-epoch from
// order.State{Consumed: C}: a resume.
func loaderMain(args []string) error {
	fs := flag.NewFlagSet("loader", flag.ContinueOnError)
	out := fs.String("out", "", "write the step record to `FILE`")
	step := fs.String("step", "loader", "step `NAME`")
	shards := fs.String("shards", "", "shard `DIR`")
	bs := fs.Int("batch", 32, "images per batch")
	imgsz := fs.Int("imgsz", 128, "output image side")
	nb := fs.Int64("batches", 0, "batches to stream (0: to the end of the epoch)")
	consume := fs.Int64("consume", 0, "start the epoch with this many samples already consumed (a resume)")
	seed := fs.Uint64("seed", 1, "shuffle and augmentation seed")
	cache := fs.Int64("cache", pipeline.DefaultCacheBytes, "decoded-image cache `BYTES`")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the streaming to `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *shards == "" {
		return errors.New("loader: want --out FILE --shards DIR")
	}
	// As the segpipe binary does (main.go).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(25)
	}
	ctx := context.Background()
	src, err := pipeline.OpenShards(*shards)
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	defer src.Close()
	opened := time.Since(started)
	rows := src.BlockRows()
	var n int64
	for _, r := range rows {
		n += int64(r)
	}

	// What opening the set kept: the live heap, and the peak so far.
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	liveOpen := m0.HeapAlloc
	_, rssOpen := selfRusage()

	a := augment.DefaultConfig()
	a.ImgSz = *imgsz
	start := order.State{Seed: *seed, Consumed: *consume}
	cfg := pipeline.Config{BatchSize: *bs, Start: start, Augment: a, CacheBytes: *cache}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return fmt.Errorf("loader: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("loader: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, _ := selfRusage()
	t0 := time.Now()
	l, err := pipeline.New(ctx, src, cfg)
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	defer l.Close()
	var first time.Duration
	var mid order.State
	var batches, images, masks int64
	for {
		rec, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("loader: batch %d: %w", batches, err)
		}
		if batches == 0 {
			first = time.Since(started)
			mid = l.State() // what a checkpoint after one batch would save
		}
		batches++
		images += rec.NumRows()
		masks += sumBoxes(rec)
		rec.Release()
		if *nb > 0 && batches >= *nb {
			break
		}
	}
	wall := time.Since(t0).Seconds()
	st := l.Stats()
	state := l.State()
	cpu1, _ := selfRusage()
	if err := l.Close(); err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	_, rss := selfRusage()

	// One epoch's order alone, after the run so that it does not add to
	// the peak above: its build time and the bytes it allocates, the
	// per-image state the loader keeps beside its fixed buffers.
	runtime.ReadMemStats(&m0)
	t := time.Now()
	ep, err := order.NewEpoch(*seed, 0, rows, 0)
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	orderS := time.Since(t).Seconds()
	runtime.ReadMemStats(&m1)
	orderBytes := m1.TotalAlloc - m0.TotalAlloc
	runtime.KeepAlive(ep)
	js, err := json.Marshal(mid)
	if err != nil {
		return err
	}
	bin := binary.AppendUvarint(nil, mid.Seed)
	bin = binary.AppendUvarint(bin, uint64(mid.Epoch))
	bin = binary.AppendUvarint(bin, uint64(mid.Consumed))
	perImage := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(max(images, 1)) }
	s := &Step{Step: *step, N: n, WallS: wall, CPUS: cpu1 - cpu0, MaxRSSBytes: rss, Extra: map[string]float64{
		"open_s":               opened.Seconds(),
		"first_batch_s":        first.Seconds(),
		"batches":              float64(batches),
		"images":               float64(images),
		"masks":                float64(masks),
		"blocks":               float64(len(rows)),
		"consumed_at_start":    float64(*consume),
		"order_build_s":        orderS,
		"order_bytes":          float64(orderBytes),
		"live_heap_open_bytes": float64(liveOpen), // the set open, no loader yet
		"peak_rss_open_bytes":  float64(rssOpen),
		"state_json_bytes":     float64(len(js)), // the state after the first batch
		"state_consumed":       float64(mid.Consumed),
		"state_fixed_bytes":    24, // three 8-byte integers, whatever N
		"state_varint_bytes":   float64(len(bin)),
		"decode_ms_per_image":  perImage(st.Decode),
		"augment_ms_per_image": perImage(st.Augment),
		"raster_ms_per_image":  perImage(st.Raster),
		"collate_ms_per_image": perImage(st.Collate),
		"raster_ns_per_mask":   st.Raster.Seconds() * 1e9 / float64(max(masks, 1)),
		"decodes_per_image":    st.DecodesPerImage,
		"instances_dropped":    float64(st.Dropped),
		"crowd_dropped":        float64(st.CrowdDropped),
	}}
	fmt.Fprintf(os.Stderr, "scalegen loader: %d batches, %d images, %d masks, first batch at %.2fs, state after it %s, at the end %+v\n",
		batches, images, masks, first.Seconds(), js, state)
	return writeStep(*out, s)
}

// sumBoxes returns the instances of a batch (the sum of boxes_per_image).
func sumBoxes(rec arrow.RecordBatch) int64 {
	idx := rec.Schema().FieldIndices(batch.ColBoxesPerImage)
	if len(idx) == 0 {
		return 0
	}
	col, ok := rec.Column(idx[0]).(*array.Int32)
	if !ok {
		return 0
	}
	var n int64
	for _, v := range col.Int32Values() {
		n += int64(v)
	}
	return n
}
