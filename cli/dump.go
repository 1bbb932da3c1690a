package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// batchFlags are the loader settings of the commands that make batches
// locally (dump, preview).
func batchFlags(batchSize int) []ucli.Flag {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "shards", Usage: "shard `DIR` or URL (with manifest.json; s3://, gs://, azblob://, file://)", Required: true},
		&ucli.IntFlag{Name: "batch", Value: batchSize, Usage: "images per batch"},
		&ucli.IntFlag{Name: "imgsz", Value: augment.DefaultImgSz, Usage: "output image side"},
		&ucli.Uint64Flag{Name: "seed", Usage: "shuffle and augmentation seed"},
		&ucli.IntFlag{Name: "epoch", Usage: "epoch to draw batches from"},
		&ucli.BoolFlag{Name: "val", Usage: "validation mode (letterbox only)"},
		&ucli.BoolFlag{Name: "rect", Usage: "rectangular batches in aspect-ratio order, as Ultralytics' rect (in training: mosaic, mixup and cutmix off)"},
		&ucli.FloatFlag{Name: "multi-scale", Usage: "training batches each at a side drawn on the 32 px grid in imgsz·(1 ± `M`), as Ultralytics' multi_scale"},
		&ucli.IntFlag{Name: "workers", Usage: "worker goroutines (0: GOMAXPROCS)"},
		strictFlag(),
	}
	return append(flags, augmentFlags()...)
}

// strictFlag is --strict of the commands that run a loader.
func strictFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "strict", Usage: "fail on the first damaged or undecodable sample instead of skipping and counting it"}
}

// runDirFlag is --run-dir of the commands that run a loader.
func runDirFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "run-dir", Usage: "write the run's skip summary to `DIR`/" + pipeline.SkipSummaryName}
}

// reportSkips prints the end-of-run skip summary to w and, with --run-dir,
// stores it there.
func reportSkips(c *ucli.Command, w io.Writer, s pipeline.SkipSummary) error {
	if w != nil {
		if err := s.Print(w); err != nil {
			return err
		}
	}
	if dir := c.String("run-dir"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return s.WriteFile(dir)
	}
	return nil
}

func batchConfig(c *ucli.Command) (pipeline.Config, error) {
	a := augment.DefaultConfig()
	a.ImgSz = int(c.Int("imgsz"))
	readAugment(c, &a)
	cfg := pipeline.Config{
		BatchSize: int(c.Int("batch")), Workers: int(c.Int("workers")), Val: c.Bool("val"), Augment: a,
		Start: order.State{Seed: c.Uint64("seed"), Epoch: int(c.Int("epoch"))}, Strict: c.Bool("strict"),
		Rect: c.Bool("rect"), MultiScale: c.Float("multi-scale"),
	}
	if err := checkRanges(c, atLeast("batch", 1), atLeast("imgsz", 1), atLeast("epoch", 0), atLeast("workers", 0)); err != nil {
		return cfg, err
	}
	if err := a.Validate(); err != nil {
		return cfg, usagef("%v", err)
	}
	// rect with multi_scale, or multi_scale out of range or in
	// validation: the caller's flags, not the data.
	if err := cfg.Validate(); errors.Is(err, pipeline.ErrInvalidConfig) {
		return cfg, usagef("%v", err)
	}
	return cfg, nil
}

func dumpCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "dump",
		Usage:     "write training batches to an Arrow IPC stream file",
		UsageText: "segpipe dump --shards DIR --batches N --out batches.arrows [--batch 32] [--imgsz 640] [--seed S] [--summary FILE]",
		Description: "Streams the first N training batches of the loader (the same batches a trainer\n" +
			"or `segpipe serve` gets for these settings) into one Arrow IPC stream file, no\n" +
			"compression: any Arrow reader opens it (pyarrow.ipc.open_stream, apache-arrow for\n" +
			"JavaScript). Images and masks are arrow.fixed_shape_tensor columns. --summary\n" +
			"writes a JSON file of counts and one probed mask value for cross-checking readers.\n" +
			"Damaged shard data and undecodable images are skipped and counted (the summary is\n" +
			"printed at the end and stored with --run-dir) unless --strict. The file holds exactly\n" +
			"N batches: when an epoch ends first (a small set, or skipped samples), the next\n" +
			"epochs follow, as in a longer run; a set that yields no batch fails (exit 1).\n\n" +
			"Example:\n  segpipe dump --shards shards/val2017 --batches 4 --out batches.arrows",
		Flags: append(batchFlags(32),
			&ucli.IntFlag{Name: "batches", Value: 1, Usage: "number of batches"},
			&ucli.StringFlag{Name: "out", Usage: "output `FILE` (Arrow IPC stream)", Required: true},
			&ucli.StringFlag{Name: "summary", Usage: "also write a JSON summary to `FILE`"},
			maxMemoryFlag(),
			runDirFlag(),
		),
		Action: func(ctx context.Context, c *ucli.Command) error {
			cfg, err := batchConfig(c)
			if err != nil {
				return err
			}
			if err := checkRanges(c, atLeast("batches", 1)); err != nil {
				return err
			}
			if cfg.MaxMemory, err = memoryBudget(c); err != nil {
				return err
			}
			cfg.CacheBytes = budgetCache(pipeline.DefaultCacheBytes, cfg.MaxMemory)
			sum, skips, err := dump(ctx, c.String("shards"), cfg, int(c.Int("batches")), c.String("out"))
			if err != nil {
				return err
			}
			sum.Skipped = skips.Skipped
			if p := c.String("summary"); p != "" {
				b, _ := json.MarshalIndent(sum, "", "  ")
				if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
					return err
				}
			}
			if _, err = fmt.Fprintf(c.Root().Writer, "wrote %d batches (%d images, %d instances, %.1f MiB) to %s\n",
				len(sum.Batches), sum.Images, sum.Instances, float64(sum.Bytes)/(1<<20), c.String("out")); err != nil {
				return err
			}
			return reportSkips(c, c.Root().Writer, skips)
		},
	}
}

// dumpSummary describes a dump for readers in other languages to check
// against: per batch its rows, instances and ON mask cells, and one probed
// mask cell.
type dumpSummary struct {
	Images    int64          `json:"images"`
	Instances int64          `json:"instances"`
	Bytes     int64          `json:"bytes"`
	MaskShape []int          `json:"mask_shape"`
	ImgShape  []int          `json:"image_shape"`
	Batches   []batchSummary `json:"batches"`
	Probe     *maskProbe     `json:"probe,omitempty"`
	// Skipped is the loader's skip counts by reason (pipeline.SkipSummary).
	Skipped map[string]int64 `json:"skipped"`
}

type batchSummary struct {
	Rows          int64   `json:"rows"`
	Instances     int     `json:"instances"`
	MaskOnes      int64   `json:"mask_ones"`
	BoxesPerImage []int32 `json:"boxes_per_image"`
}

// maskProbe is one cell of the (sum_N, Hp, Wp) stack of one batch.
type maskProbe struct {
	Batch, Instance, Row, Col int
	Value                     uint8
}

func (p *maskProbe) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int{"batch": p.Batch, "instance": p.Instance, "row": p.Row, "col": p.Col, "value": int(p.Value)})
}

// dump writes the first n batches of the loader over the shards at dir to
// out. An epoch yields fewer batches than its rows fill when samples are
// skipped (a damaged shard, an undecodable image), so the dump continues
// into the following epochs, as a run of more epochs would, until it has
// n: a fixture of N batches holds N. It fails only when an epoch yields
// none.
func dump(ctx context.Context, dir string, cfg pipeline.Config, n int, out string) (*dumpSummary, pipeline.SkipSummary, error) {
	skips := pipeline.SkipSummary{Skipped: map[string]int64{}}
	src, err := openShards(ctx, "--shards", dir)
	if err != nil {
		return nil, skips, err
	}
	defer src.Close()
	if m, err := cfg.MemoryOf(src); err == nil {
		logEstimate("dump", m, cfg.MaxMemory)
	}
	rows := 0
	for _, r := range src.BlockRows() {
		rows += r
	}
	perEpoch := (rows + cfg.BatchSize - 1) / cfg.BatchSize
	f, err := os.Create(out)
	if err != nil {
		return nil, skips, err
	}
	defer f.Close()
	d := &dumpWriter{out: out, f: f, sum: &dumpSummary{}}
	for epoch := cfg.Start.Epoch; len(d.sum.Batches) < n; {
		// Each pass runs exactly the epochs that hold the batches still
		// wanted if nothing is skipped, so that the loader builds (and its
		// skip summary counts) no epoch the dump does not read.
		need := n - len(d.sum.Batches)
		pass := cfg
		pass.Start = order.State{Seed: cfg.Start.Seed, Epoch: epoch}
		pass.Epochs = epoch + max((need+perEpoch-1)/max(perEpoch, 1), 1)
		got, err := d.pass(ctx, src, pass, need, &skips)
		if err != nil {
			return nil, skips, err
		}
		if got == 0 {
			if len(d.sum.Batches) == 0 {
				return nil, skips, fmt.Errorf("dump: the loader made no batch from %s (%s)", dir, skips)
			}
			return nil, skips, fmt.Errorf("dump: wrote %d of the %d batches asked to %s: epochs %d to %d of %s made none (%s)",
				len(d.sum.Batches), n, out, epoch, pass.Epochs-1, dir, skips)
		}
		epoch = pass.Epochs
	}
	if err := d.close(); err != nil {
		return nil, skips, err
	}
	return d.sum, skips, nil
}

// dumpWriter writes the batches of one or more loader passes to one Arrow
// IPC stream.
type dumpWriter struct {
	out string
	f   *os.File
	w   *ipc.Writer
	sum *dumpSummary
}

// pass writes up to n batches of a loader over src with cfg, adds the
// loader's skips to skips and returns how many it wrote.
func (d *dumpWriter) pass(ctx context.Context, src pipeline.Source, cfg pipeline.Config, n int, skips *pipeline.SkipSummary) (int, error) {
	l, err := pipeline.New(ctx, src, cfg)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	defer func() {
		s := l.Stats().Summary()
		skips.Images += s.Images
		for k, v := range s.Skipped {
			skips.Skipped[k] += v
		}
	}()
	got := 0
	for rec, err := range l.All(ctx) {
		if err != nil {
			return got, err
		}
		if d.w == nil {
			d.w = ipc.NewWriter(d.f, ipc.WithSchema(rec.Schema()))
		}
		err = summarise(d.sum, rec)
		if err == nil {
			err = d.w.Write(rec)
		}
		rec.Release()
		if err != nil {
			return got, fmt.Errorf("dump %s batch %d: %w", d.out, len(d.sum.Batches)-1, err)
		}
		if got++; got == n {
			break
		}
	}
	return got, nil
}

// close ends the stream and records the file's size.
func (d *dumpWriter) close() error {
	if err := d.w.Close(); err != nil {
		return err
	}
	if err := d.f.Close(); err != nil {
		return err
	}
	if st, err := os.Stat(d.out); err == nil {
		d.sum.Bytes = st.Size()
	}
	return nil
}

// withEpochs runs the loader long enough for n batches.
func withEpochs(cfg pipeline.Config, n int) pipeline.Config {
	cfg.Epochs = cfg.Start.Epoch + 1 + n
	return cfg
}

func summarise(sum *dumpSummary, rec arrow.RecordBatch) error {
	ms, err := batch.MaskStack(rec)
	if err != nil {
		return err
	}
	im, err := batch.ImageTensor(rec)
	if err != nil {
		return err
	}
	sum.MaskShape, sum.ImgShape = ms.Shape, im.Shape
	b := batchSummary{Rows: rec.NumRows(), Instances: ms.Count}
	for i := 0; i+1 < len(ms.Offsets); i++ {
		b.BoxesPerImage = append(b.BoxesPerImage, ms.Offsets[i+1]-ms.Offsets[i])
	}
	for _, v := range ms.Data {
		b.MaskOnes += int64(v)
	}
	// Probe the first ON cell of the middle instance: a value that only a
	// reader which splits the stack correctly finds.
	if sum.Probe == nil && ms.Count > 0 {
		k := ms.Count / 2
		plane := ms.At(k)
		for j, v := range plane {
			if v != 0 {
				sum.Probe = &maskProbe{Batch: len(sum.Batches), Instance: k, Row: j / ms.Shape[1], Col: j % ms.Shape[1], Value: v}
				break
			}
		}
	}
	sum.Images += b.Rows
	sum.Instances += int64(b.Instances)
	sum.Batches = append(sum.Batches, b)
	return nil
}
