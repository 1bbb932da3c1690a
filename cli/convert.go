package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/yolo"
	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/bytesize"
)

func convertCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "convert",
		Usage: "convert a dataset into Parquet shards",
		Description: "Converts a COCO or Ultralytics YOLO dataset into segpipe's shard format: Parquet files\n" +
			"of one row per image (original image bytes, or with --pixels raw|zstd pre-decoded\n" +
			"RGB pixels, plus every instance's class, box, polygons and crowd RLE) and a\n" +
			"manifest.json that lists them. Bad items are skipped and counted by reason (or\n" +
			"fail the run with --strict). See the sub-commands.\n\n" +
			"Pre-decoded shards (--pixels raw|zstd, --max-side N) trade disk for loader CPU:\n" +
			"4-5x the bytes of the JPEGs, no JPEG decode per image in training.\n\n" +
			"Example:\n  segpipe convert coco --annotations instances_val2017.json --images val2017 --out shards/val",
		Commands: []*ucli.Command{convertCocoCommand(), convertYoloCommand()},
	}
}

// convertFlags are shared by every convert sub-command.
func convertFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "out", Usage: "output `DIR` or URL (s3://bucket/prefix, gs://, azblob://, file://) for the shards and manifest.json", Required: true},
		&ucli.StringFlag{Name: "shard-size", Value: "256MiB", Usage: "target shard `SIZE` (bytes, or with KiB/MiB/GiB/KB/MB/GB)"},
		&ucli.BoolFlag{Name: "strict", Usage: "fail on the first bad item instead of skipping and counting it"},
		&ucli.BoolFlag{Name: "resume", Usage: "continue an interrupted conversion in --out (same flags required)"},
		&ucli.IntFlag{Name: "workers", Usage: "goroutines reading (and with --pixels raw|zstd decoding) image files (0: one per CPU)"},
		&ucli.StringFlag{Name: "pixels", Value: shard.FormatJPEG, Usage: "how images are stored, `ENC`: jpeg keeps each file's " +
			"bytes as they are (smallest: 150 KiB a coco-tiny image; the loader decodes every image, about 3 ms of CPU " +
			"each in pure Go); raw stores decoded RGB, 3 bytes a pixel (790 KiB a coco-tiny image, 5.3x; the loader " +
			"copies it); zstd stores the same as a zstd frame (633 KiB, 4.2x; about 1 ms to inflate). Converting costs " +
			"about 11 (raw) or 18 (zstd) ms of CPU an image. raw and zstd write format version 3, which segpipe " +
			"releases before it cannot read"},
		&ucli.IntFlag{Name: "max-side", Usage: "with --pixels raw|zstd: shrink images whose long side exceeds `N` pixels to N " +
			"(exact area averaging, never upscaled; boxes, polygons, areas and crowd masks scaled with them, the source " +
			"size kept so predictions map back to it); 0 keeps every size. The training --imgsz is the natural N: " +
			"bytes and decode time fall with the pixel count"},
		&ucli.IntFlag{Name: "max-image-pixels", Value: imagehdr.MaxPixels, Usage: "skip (or with --strict refuse) an image whose " +
			"header says more than `N` pixels (width·height), counted as " + datasets.ReasonImageTooLarge + ", before any of it is " +
			"decoded; the default, 8192², bounds one decode to about half a GiB"},
		partFlag(),
	}
}

func convertCocoCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "coco",
		Usage:     "convert a COCO instances JSON file and its image directory",
		UsageText: "segpipe convert coco --annotations FILE --images DIR --out DIR [options]",
		Description: "Reads a COCO instances file (parsed streaming, so train2017's 448 MB file fits\n" +
			"in memory comfortably) and the images it lists, and writes part-NNNNN.parquet\n" +
			"shards plus manifest.json to --out. Output is byte-identical for the same input\n" +
			"and flags; an interrupted run continues with --resume without redoing finished\n" +
			"shards. Skipped items are summarised at the end and recorded in the manifest.\n\n" +
			"Example:\n  segpipe convert coco --annotations annotations/instances_val2017.json \\\n" +
			"    --images val2017 --out shards/val2017",
		Flags: append([]ucli.Flag{
			&ucli.StringFlag{Name: "annotations", Usage: "COCO instances JSON `FILE`", Required: true},
			&ucli.StringFlag{Name: "images", Usage: "image `DIR` the file_name fields are relative to", Required: true},
		}, convertFlags()...),
		Action: func(ctx context.Context, c *ucli.Command) error {
			opts, err := parseConvertFlags(c)
			if err != nil {
				return err
			}
			ann, imgs := c.String("annotations"), c.String("images")
			if st, err := os.Stat(ann); err != nil || st.IsDir() {
				return usagef("--annotations %q is not a file: pass the COCO instances JSON file (e.g. annotations/instances_val2017.json)", ann)
			}
			if st, err := os.Stat(imgs); err != nil || !st.IsDir() {
				return usagef("--images %q is not a directory: pass the directory the annotations' file_name fields are relative to (e.g. val2017)", imgs)
			}
			src := shard.Source{Kind: "coco", Args: map[string]string{
				"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
			opts.record(&src)
			return convert(ctx, c, src, opts, func() (imageSource, error) {
				return coco.Open(ann, imgs, coco.Options{Strict: opts.strict, Workers: opts.workers, Pixels: opts.pixels, MaxPixels: opts.maxPixels})
			})
		},
	}
}

func convertYoloCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "yolo",
		Usage:     "convert one split of an Ultralytics YOLO dataset",
		UsageText: "segpipe convert yolo --data data.yaml --split train --out DIR [options]",
		Description: "Reads an Ultralytics-format dataset: data.yaml (names, and the split's image\n" +
			"directories or list files) and labels/.../*.txt with 'cls x1 y1 x2 y2 ...' normalised\n" +
			"polygons or 'cls cx cy w h' boxes. Image sizes come from the image headers and\n" +
			"coordinates become pixels, so the shards are the same format as from COCO: class ids\n" +
			"are the category ids and indices. Same bad-input policy, determinism and --resume\n" +
			"as convert coco.\n\n" +
			"Example:\n  segpipe convert yolo --data coco8-seg/data.yaml --split train --out shards/coco8-train",
		Flags: append([]ucli.Flag{
			&ucli.StringFlag{Name: "data", Usage: "the dataset's data.yaml `FILE`", Required: true},
			&ucli.StringFlag{Name: "split", Value: "train", Usage: "`SPLIT` key of data.yaml to convert (train, val, test, ...)"},
		}, convertFlags()...),
		Action: func(ctx context.Context, c *ucli.Command) error {
			opts, err := parseConvertFlags(c)
			if err != nil {
				return err
			}
			data, split := c.String("data"), c.String("split")
			if err := checkInputPath("--data", data, false); err != nil {
				return err
			}
			src := shard.Source{Kind: "yolo", Args: map[string]string{"data": filepath.Clean(data), "split": split}}
			opts.record(&src)
			return convert(ctx, c, src, opts, func() (imageSource, error) {
				return yolo.Open(data, split, yolo.Options{Strict: opts.strict, Workers: opts.workers, Pixels: opts.pixels, MaxPixels: opts.maxPixels})
			})
		},
	}
}

// imageSource is what convert needs from a dataset reader. Images must
// emit exactly Len() images in a fixed order, start counting emitted
// images: that is what makes --resume reproduce an uninterrupted run.
type imageSource interface {
	Categories() []shard.Category
	Len() int
	Images(ctx context.Context, start int, fn func(*shard.Image) error) error
	Report() *datasets.Report
}

type convertOpts struct {
	out       string
	shardSize int64
	strict    bool
	resume    bool
	workers   int
	pixels    *shard.Pixels     // --pixels raw|zstd; nil for jpeg (the files as they are)
	part      *shard.Part       // --part: one slice of a distributed conversion
	layout    *shard.PartLayout // the part's shards, planned once the source is open
	maxPixels int64             // --max-image-pixels
}

// record notes in the manifest's source the flags that change which images
// are kept, when not at their defaults (so a default conversion's manifest
// is what it always was, and --resume refuses a changed one).
func (o convertOpts) record(src *shard.Source) {
	if o.maxPixels != imagehdr.MaxPixels {
		src.Args["max_image_pixels"] = strconv.FormatInt(o.maxPixels, 10)
	}
}

func parseConvertFlags(c *ucli.Command) (convertOpts, error) {
	o := convertOpts{out: c.String("out"), strict: c.Bool("strict"), resume: c.Bool("resume"), workers: int(c.Int("workers"))}
	var err error
	if o.shardSize, err = bytesize.Parse(c.String("shard-size")); err != nil {
		return o, usagef("--shard-size: %v", err)
	}
	if o.workers < 0 {
		return o, usagef("--workers %d: want 0 (one per CPU) or more", o.workers)
	}
	if o.maxPixels = int64(c.Int("max-image-pixels")); o.maxPixels <= 0 {
		return o, usagef("--max-image-pixels %d: want a positive pixel count (default %d)", o.maxPixels, int64(imagehdr.MaxPixels))
	}
	if o.part, err = parsePartFlag(c); err != nil {
		return o, err
	}
	if o.pixels, err = parsePixelsFlags(c); err != nil {
		return o, err
	}
	return o, nil
}

// parsePixelsFlags reads --pixels and --max-side.
func parsePixelsFlags(c *ucli.Command) (*shard.Pixels, error) {
	enc, side := c.String("pixels"), c.Int("max-side")
	if side < 0 || side > 1<<15 {
		return nil, usagef("--max-side %d: want 0 (keep every size) to 32768", side)
	}
	switch enc {
	case shard.FormatJPEG:
		if side != 0 {
			return nil, usagef("--max-side needs --pixels raw or zstd: with --pixels jpeg each file's bytes are stored as they are")
		}
		return nil, nil
	case shard.FormatRaw, shard.FormatZstd:
		p := &shard.Pixels{Encoding: enc, MaxSide: int(side)}
		if side > 0 {
			p.Resample = shard.ResampleArea
		}
		return p, nil
	}
	return nil, usagef("--pixels %q: want jpeg, raw or zstd", enc)
}

// convert opens the source, writes the shards and prints a summary.
func convert(ctx context.Context, c *ucli.Command, desc shard.Source, o convertOpts, open func() (imageSource, error)) error {
	out := c.Root().Writer
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	src, err := open()
	if errors.Is(err, datasets.ErrImagesNotFound) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	slog.Info("source opened", "kind", desc.Kind, "images", src.Len(), "categories", len(src.Categories()),
		"skipped", src.Report().Total(), "seconds", round1(time.Since(t0).Seconds()))
	if o.layout, err = planPart(ctx, src, o); err != nil {
		return err
	}
	res, err := writeShards(ctx, c.Root().ErrWriter, src, desc, o)
	if errors.Is(err, shard.ErrComplete) {
		fmt.Fprintf(out, "%s already holds this finished conversion; nothing to do.\n", o.out)
		return nil
	}
	if err != nil {
		return err
	}
	printConvertSummary(out, res, src.Report(), time.Since(t0))
	printPartSummary(out, o)
	return nil
}

type convertResult struct {
	manifest *shard.Manifest
	out      string
	resumed  int   // rows kept from an interrupted run
	written  int   // rows written by this run
	inBytes  int64 // image bytes read by this run
	elapsed  time.Duration
}

// writeShards streams src into a shard writer; on any failure it leaves
// finished shards and the journal behind for --resume.
func writeShards(ctx context.Context, stderr io.Writer, src imageSource, desc shard.Source, o convertOpts) (*convertResult, error) {
	t0 := time.Now()
	lo, hi := o.rowRange(src.Len())
	rows := lo
	w, err := shard.Create(o.out, shard.WriterOptions{
		ShardBytes: o.shardSize,
		Source:     desc,
		Categories: src.Categories(),
		Resume:     o.resume,
		Pixels:     o.pixels,
		Checkpoint: func() shard.Checkpoint { return shard.Checkpoint{Next: int64(rows)} },
		Layout:     o.layout,
	})
	if err != nil {
		return nil, err
	}
	if cp, ok := w.Resumed(); ok {
		rows = int(cp.Next)
		if rows > hi {
			w.Abort()
			return nil, fmt.Errorf("resume: %s recorded %d finished rows but the source now has %d images", o.out, rows, hi)
		}
		slog.Info("resuming", "out", o.out, "finished_shards", len(w.Shards()), "rows_done", rows-lo)
	}
	res := &convertResult{out: o.out, resumed: rows - lo}
	bar := newProgress(stderr, "convert", int64(hi-lo), int64(rows-lo))
	err = src.Images(ctx, rows, func(img *shard.Image) error {
		if rows == hi {
			return errPartEnd
		}
		// rows counts this image before Write: a shard it completes
		// checkpoints the position after it.
		rows++
		if err := w.Write(img); err != nil {
			return err
		}
		res.written++
		res.inBytes += int64(len(img.Bytes))
		bar.add(1, int64(len(img.Bytes)))
		return nil
	})
	bar.finish()
	if errors.Is(err, errPartEnd) {
		err = nil
	}
	if err == nil && rows != hi {
		err = fmt.Errorf("source emitted %d images, expected %d", rows, hi)
	}
	if err != nil {
		w.Abort()
		if done := len(w.Shards()); done > 0 {
			err = fmt.Errorf("%w (%d finished shards kept in %s: rerun with --resume to continue)", err, done, o.out)
		}
		return nil, err
	}
	res.manifest, err = w.Close(src.Report().Counts())
	if err != nil {
		return nil, err
	}
	res.elapsed = time.Since(t0)
	return res, nil
}

func printConvertSummary(w io.Writer, r *convertResult, rep *datasets.Report, total time.Duration) {
	m := r.manifest
	secs := max(r.elapsed.Seconds(), 1e-9)
	fmt.Fprintf(w, "wrote %d images, %d instances, %d categories into %d shards (%s) in %s\n",
		m.Rows, m.Instances, len(m.Categories), len(m.Shards), bytesize.Format(m.Bytes), r.out)
	if p := m.Pixels; p != nil && m.Rows > 0 {
		side := "source sizes"
		if p.MaxSide > 0 {
			side = fmt.Sprintf("long side at most %d (%s resampling)", p.MaxSide, p.Resample)
		}
		fmt.Fprintf(w, "pixels: %s, %s, %s per image\n", p.Encoding, side, bytesize.Format(m.Bytes/m.Rows))
	}
	if r.resumed > 0 {
		fmt.Fprintf(w, "resumed: %d images were already in finished shards\n", r.resumed)
	}
	fmt.Fprintf(w, "time: %.1fs total, %.1fs writing (%.0f images/s, %.1f MB/s of image data)\n",
		total.Seconds(), r.elapsed.Seconds(), float64(r.written)/secs, float64(r.inBytes)/1e6/secs)
	counts := rep.Counts()
	if len(counts) == 0 {
		fmt.Fprintln(w, "skipped: nothing")
		return
	}
	fmt.Fprintf(w, "skipped %d items (details in the log; counts in manifest.json):\n", rep.Total())
	for _, k := range sortedKeys(counts) {
		fmt.Fprintf(w, "  %-24s %d\n", k, counts[k])
	}
}
