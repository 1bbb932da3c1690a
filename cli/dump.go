package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"

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
	return []ucli.Flag{
		&ucli.StringFlag{Name: "shards", Usage: "shard `DIR` or URL (with manifest.json; s3://, gs://, azblob://, file://)", Required: true},
		&ucli.IntFlag{Name: "batch", Value: batchSize, Usage: "images per batch"},
		&ucli.IntFlag{Name: "imgsz", Value: augment.DefaultImgSz, Usage: "output image side"},
		&ucli.Uint64Flag{Name: "seed", Usage: "shuffle and augmentation seed"},
		&ucli.IntFlag{Name: "epoch", Usage: "epoch to draw batches from"},
		augmentFlag("mosaic"),
		&ucli.BoolFlag{Name: "val", Usage: "validation mode (letterbox only)"},
		&ucli.IntFlag{Name: "workers", Usage: "worker goroutines (0: GOMAXPROCS)"},
		strictFlag(),
	}
}

// augmentFlag is the flag of a float augmentation setting, with the
// table's default and usage (augment.Config).
func augmentFlag(name string) ucli.Flag {
	s, ok := augment.Lookup(name)
	if !ok || s.Kind != reflect.Float64 {
		panic("augmentFlag: no float setting " + name) // a mistake in this file
	}
	return &ucli.FloatFlag{Name: name, Value: s.Default.(float64), Usage: s.Usage}
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
	a.Mosaic = c.Float("mosaic")
	cfg := pipeline.Config{
		BatchSize: int(c.Int("batch")), Workers: int(c.Int("workers")), Val: c.Bool("val"), Augment: a,
		Start: order.State{Seed: c.Uint64("seed"), Epoch: int(c.Int("epoch"))}, Strict: c.Bool("strict"),
	}
	if cfg.BatchSize < 1 || a.ImgSz < 1 || cfg.Start.Epoch < 0 || cfg.Workers < 0 {
		return cfg, usagef("--batch and --imgsz must be at least 1, --epoch and --workers not negative")
	}
	if err := a.Validate(); err != nil {
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
			"printed at the end and stored with --run-dir) unless --strict.\n\n" +
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
			if c.Int("batches") < 1 {
				return usagef("--batches must be at least 1")
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

func dump(ctx context.Context, dir string, cfg pipeline.Config, n int, out string) (*dumpSummary, pipeline.SkipSummary, error) {
	var skips pipeline.SkipSummary
	src, err := openShards(ctx, "--shards", dir)
	if err != nil {
		return nil, skips, err
	}
	defer src.Close()
	// Exactly the epochs that hold n batches, so that the loader builds
	// (and its skip summary counts) no epoch the dump does not read.
	rows := 0
	for _, r := range src.BlockRows() {
		rows += r
	}
	cfg = withEpochs(cfg, n)
	if perEpoch := (rows + cfg.BatchSize - 1) / cfg.BatchSize; perEpoch > 0 {
		cfg.Epochs = cfg.Start.Epoch + (n+perEpoch-1)/perEpoch
	}
	l, err := pipeline.New(ctx, src, cfg)
	if err != nil {
		return nil, skips, err
	}
	defer l.Close()
	if m, err := cfg.MemoryOf(src); err == nil {
		logEstimate("dump", m, cfg.MaxMemory)
	}
	sum, err := writeDump(ctx, l, n, out)
	skips = l.Stats().Summary()
	if err == nil && sum == nil {
		err = fmt.Errorf("dump: the loader made no batch from %s (%s)", dir, skips)
	}
	return sum, skips, err
}

// writeDump writes the first n batches of l to out; nil when there were
// none.
func writeDump(ctx context.Context, l *pipeline.Loader, n int, out string) (*dumpSummary, error) {
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var w *ipc.Writer
	sum := &dumpSummary{}
	for rec, err := range l.All(ctx) {
		if err != nil {
			return nil, err
		}
		if w == nil {
			w = ipc.NewWriter(f, ipc.WithSchema(rec.Schema()))
		}
		err = summarise(sum, rec)
		if err == nil {
			err = w.Write(rec)
		}
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("dump %s batch %d: %w", out, len(sum.Batches)-1, err)
		}
		if len(sum.Batches) == n {
			break
		}
	}
	if w == nil {
		return nil, nil
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if st, err := os.Stat(out); err == nil {
		sum.Bytes = st.Size()
	}
	return sum, nil
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
