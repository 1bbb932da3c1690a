package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segpipe/segpipe/internal/bytesize"
	"github.com/segpipe/segpipe/internal/cputime"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

func benchCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "bench",
		Usage:     "measure the training loader's throughput on a shard directory",
		UsageText: "segpipe bench --shards DIR [--batch 32] [--imgsz 640] [--workers N] [--repeat R] [--json]",
		Description: "Streams training batches (mosaic, random affine, HSV, flip, masks on the stride-4\n" +
			"grid) from --shards exactly as training would, releases each batch at once, and prints\n" +
			"images/s, time per stage (summed over workers, per output image), consumer stall,\n" +
			"decodes per output image, allocations per batch and peak RSS. --repeat lengthens a\n" +
			"small dataset (the copies are distinct rows, decoded separately).\n\n" +
			"Example:\n  segpipe bench --shards shards/coco-tiny --repeat 8 --batch 32 --imgsz 640",
		Flags: append([]ucli.Flag{
			&ucli.StringFlag{Name: "shards", Usage: "shard `DIR` or URL (with manifest.json; s3://, gs://, azblob://, file://)", Required: true},
			&ucli.IntFlag{Name: "batch", Value: 32, Usage: "images per batch"},
			&ucli.IntFlag{Name: "imgsz", Value: augment.DefaultImgSz, Usage: "output image side"},
			&ucli.IntFlag{Name: "workers", Usage: "worker goroutines (0: GOMAXPROCS)"},
			&ucli.IntFlag{Name: "repeat", Value: 1, Usage: "repeat the dataset R times"},
			&ucli.IntFlag{Name: "epochs", Value: 1, Usage: "epochs to stream"},
			&ucli.BoolFlag{Name: "val", Usage: "validation mode (letterbox only)"},
			&ucli.Uint64Flag{Name: "seed", Value: 0, Usage: "shuffle and augmentation seed"},
			&ucli.StringFlag{Name: "cache", Usage: "decoded-image cache `SIZE` (default 512MiB, at most a quarter of --max-memory)"},
			&ucli.IntFlag{Name: "window", Value: order.DefaultWindowRows, Usage: "shuffle window rows"},
			&ucli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile to `FILE`"},
			maxMemoryFlag(),
			&ucli.StringFlag{Name: "memprofile", Usage: "write a heap profile to `FILE` after the last batch, before the loader closes"},
			strictFlag(),
			runDirFlag(),
		}, augmentFlags()...),
		Action: func(ctx context.Context, c *ucli.Command) error {
			var cache int64
			if c.IsSet("cache") {
				n, err := bytesize.Parse(c.String("cache"))
				if err != nil {
					return usagef("--cache: %v", err)
				}
				cache = n
			}
			a := augment.DefaultConfig()
			a.ImgSz = int(c.Int("imgsz"))
			readAugment(c, &a)
			cfg := pipeline.Config{
				BatchSize: int(c.Int("batch")), Workers: int(c.Int("workers")),
				Start: order.State{Seed: c.Uint64("seed")}, Epochs: int(c.Int("epochs")),
				Val: c.Bool("val"), Augment: a, CacheBytes: cache, WindowRows: int(c.Int("window")),
				Strict: c.Bool("strict"),
			}
			// --workers is the loader's to check (it names the count);
			// --imgsz 0 and --window 0 would silently take its defaults.
			if err := checkRanges(c, atLeast("repeat", 1), atLeast("batch", 1), atLeast("epochs", 1),
				atLeast("imgsz", 1), atLeast("window", 1)); err != nil {
				return err
			}
			var err error
			if cfg.MaxMemory, err = memoryBudget(c); err != nil {
				return err
			}
			if cfg.CacheBytes == 0 {
				// As dump and serve: a small container's budget is not
				// spent on the cache before a batch is built.
				cfg.CacheBytes = budgetCache(pipeline.DefaultCacheBytes, cfg.MaxMemory)
			}
			src, err := openShards(ctx, "--shards", c.String("shards"))
			if err != nil {
				return err
			}
			defer src.Close()
			if p := c.String("cpuprofile"); p != "" {
				f, err := os.Create(p)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			res, err := runBench(ctx, pipeline.Repeat(src, int(c.Int("repeat"))), cfg, c.String("memprofile"))
			if err != nil {
				return err
			}
			w := c.Root().Writer
			if err := reportSkips(c, nil, res.skips); err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return res.table(w)
		},
	}
}

// benchResult is what bench reports. Stage times are milliseconds per
// output image, summed over workers.
type benchResult struct {
	JPEG            string  `json:"jpeg_decoder"`
	Images          int64   `json:"images"`
	Batches         int64   `json:"batches"`
	Workers         int     `json:"workers"`
	GOMAXPROCS      int     `json:"gomaxprocs"`
	WallSeconds     float64 `json:"wall_s"`
	ImagesPerSec    float64 `json:"images_per_s"`
	ReadMs          float64 `json:"read_ms_per_image"`
	DecodeMs        float64 `json:"decode_ms_per_image"`
	AugmentMs       float64 `json:"augment_ms_per_image"`
	RasterMs        float64 `json:"rasterise_ms_per_image"`
	CollateMs       float64 `json:"collate_ms_per_image"`
	RasterCollate   float64 `json:"rasterise_collate_share"`
	StallSeconds    float64 `json:"consumer_stall_s"`
	DecodesPerImage float64 `json:"decodes_per_image"`
	AllocsPerBatch  float64 `json:"allocs_per_batch"`
	BytesPerBatch   float64 `json:"alloc_bytes_per_batch"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	// EstimateMiB is the memory estimate the run was judged by
	// (pipeline.Budget of the loader's terms), BudgetMiB the budget
	// (--max-memory; -1: none).
	EstimateMiB     float64 `json:"memory_estimate_mib"`
	BudgetMiB       float64 `json:"max_memory_mib"`
	skips           pipeline.SkipSummary
	CPUSeconds      float64          `json:"cpu_s"`
	ImagesPerCPUSec float64          `json:"images_per_cpu_s"`
	Skipped         map[string]int64 `json:"skipped"`
}

func runBench(ctx context.Context, src pipeline.Source, cfg pipeline.Config, memprofile string) (*benchResult, error) {
	l, err := pipeline.New(ctx, src, cfg)
	if err != nil {
		return nil, err
	}
	mem, err := cfg.MemoryOf(src)
	if err != nil {
		return nil, err
	}
	logEstimate("bench", mem, cfg.MaxMemory)
	defer l.Close()
	var m0, m1 runtime.MemStats
	var b0 int64
	cpu0 := cpuSeconds()
	for rec, err := range l.All(ctx) {
		if err != nil {
			return nil, err
		}
		rec.Release()
		// Allocation counts start after the first batches have filled the
		// pools: they measure the steady state.
		if b0 == 0 && l.Stats().Batches >= 3 {
			runtime.ReadMemStats(&m0)
			b0 = 3
		}
	}
	runtime.ReadMemStats(&m1)
	st := l.Stats()
	n := float64(max(st.Images, 1))
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	r := &benchResult{
		JPEG:   pipeline.JPEGDecoder,
		Images: st.Images, Batches: st.Batches, Workers: cfg.Workers, GOMAXPROCS: runtime.GOMAXPROCS(0),
		WallSeconds: st.Wall.Seconds(), ImagesPerSec: st.ImagesPerSec,
		ReadMs: ms(st.Read), DecodeMs: ms(st.Decode), AugmentMs: ms(st.Augment), RasterMs: ms(st.Raster), CollateMs: ms(st.Collate),
		StallSeconds: st.Stall.Seconds(), DecodesPerImage: st.DecodesPerImage, PeakRSSMiB: peakRSSMiB(), Skipped: st.Summary().Skipped,
		EstimateMiB: float64(pipeline.Budget(mem.Total())) / (1 << 20), BudgetMiB: max(float64(cfg.MaxMemory)/(1<<20), -1),
		skips: st.Summary(),
	}
	r.CPUSeconds = cpuSeconds() - cpu0
	if r.CPUSeconds > 0 {
		r.ImagesPerCPUSec = float64(st.Images) / r.CPUSeconds
	}
	if r.Workers == 0 {
		r.Workers = runtime.GOMAXPROCS(0)
	}
	if total := st.Read + st.Decode + st.Augment + st.Raster + st.Collate; total > 0 {
		r.RasterCollate = float64(st.Raster+st.Collate) / float64(total)
	}
	if nb := st.Batches - b0; b0 > 0 && nb > 0 {
		r.AllocsPerBatch = float64(m1.Mallocs-m0.Mallocs) / float64(nb)
		r.BytesPerBatch = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(nb)
	}
	// After the figures, while the loader (its cache, its pools) is open.
	if memprofile != "" {
		if err := writeHeapProfile(memprofile); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *benchResult) table(w interface{ Write([]byte) (int, error) }) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "images\t%d (%d batches, %d workers, GOMAXPROCS %d)\n", r.Images, r.Batches, r.Workers, r.GOMAXPROCS)
	fmt.Fprintf(tw, "jpeg decoder\t%s\n", r.JPEG)
	fmt.Fprintf(tw, "wall\t%.2f s\n", r.WallSeconds)
	fmt.Fprintf(tw, "throughput\t%.1f images/s\n", r.ImagesPerSec)
	fmt.Fprintf(tw, "cpu\t%.2f s (%.1f images per CPU-second)\n", r.CPUSeconds, r.ImagesPerCPUSec)
	fmt.Fprintf(tw, "stage (ms/image, all workers)\tread %.2f  decode %.2f  augment %.2f  rasterise %.2f  collate %.2f\n", r.ReadMs, r.DecodeMs, r.AugmentMs, r.RasterMs, r.CollateMs)
	fmt.Fprintf(tw, "rasterise+collate share\t%.1f%%\n", 100*r.RasterCollate)
	fmt.Fprintf(tw, "consumer stall\t%.2f s\n", r.StallSeconds)
	fmt.Fprintf(tw, "decodes per output image\t%.3f\n", r.DecodesPerImage)
	fmt.Fprintf(tw, "allocations per batch\t%.0f (%.1f MiB)\n", r.AllocsPerBatch, r.BytesPerBatch/(1<<20))
	fmt.Fprintf(tw, "peak RSS\t%.0f MiB (estimate %.0f MiB)\n", r.PeakRSSMiB, r.EstimateMiB)
	fmt.Fprintf(tw, "%s\n", strings.Replace(r.skips.String(), ": ", "\t", 1))
	return tw.Flush()
}

// writeHeapProfile writes the in-use heap as of the last garbage
// collection, which runs first so that the profile is current.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	return f.Close()
}

// peakRSSMiB reads VmHWM from /proc (Linux); 0 elsewhere.
func peakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is the process's CPU time: on a shared machine it measures the
// work where wall time measures the neighbours too.
func cpuSeconds() float64 { return cputime.Seconds() }
