package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// quickstartMarker marks a directory as quickstart output, so a rerun may
// replace it without risking a user's files.
const quickstartMarker = ".segpipe-quickstart"

func quickstartCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "quickstart",
		Usage:     "try segpipe end to end on a small synthetic dataset",
		UsageText: "segpipe quickstart [--dir DIR] [--images N] [--epochs E]",
		Description: "Generates a small seeded COCO-format dataset (JPEG images with drawn shapes and\n" +
			"their exact polygons), converts it into Parquet shards, inspects and verifies the\n" +
			"shards, trains YOLO26-n-seg for a few CPU epochs at 128 px (validating box and\n" +
			"mask mAP every epoch), draws predictions on a few images, and prints where\n" +
			"everything went and what to run next. It needs nothing but this binary and takes\n" +
			"a few minutes on 2 cores (--epochs 0 skips training: seconds). Rerunning replaces\n" +
			"the previous quickstart output in --dir; a non-empty directory it did not create\n" +
			"is refused.\n\n" +
			"Example:\n  segpipe quickstart --dir /tmp/segpipe-quickstart",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "dir", Value: "segpipe-quickstart", Usage: "working `DIR` for the dataset and shards"},
			&ucli.IntFlag{Name: "images", Value: 200, Usage: "number of synthetic `N` images"},
			&ucli.IntFlag{Name: "epochs", Value: 3, Usage: "training epochs `E` (0: stop after converting)"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			if c.NArg() > 0 {
				return usagef("quickstart takes no arguments, got %q", c.Args().Slice())
			}
			n := int(c.Int("images"))
			if n < 1 || n > 100000 {
				return usagef("--images %d: want 1..100000", n)
			}
			epochs := int(c.Int("epochs"))
			if epochs < 0 || epochs > 1000 {
				return usagef("--epochs %d: want 0..1000", epochs)
			}
			return quickstart(ctx, c.Root().Writer, c.Root().ErrWriter, c.String("dir"), n, epochs)
		},
	}
}

func quickstart(ctx context.Context, w, stderr io.Writer, dir string, n, epochs int) error {
	if err := prepareQuickstartDir(dir); err != nil {
		return err
	}
	t0 := time.Now()
	data, shards := filepath.Join(dir, "dataset"), filepath.Join(dir, "shards")
	cfg := synth.Config{Images: n, Seed: 1, Split: "train"}
	steps := 3
	if epochs > 0 {
		steps = 6
	}

	fmt.Fprintf(w, "1/%d synthesising %d COCO-format images into %s\n", steps, n, data)
	if err := synth.Generate(data, cfg); err != nil {
		return fmt.Errorf("quickstart: synthesise: %w", err)
	}
	ann, imgs := synth.AnnotationsPath(data, cfg), synth.ImagesDir(data)

	fmt.Fprintf(w, "2/%d converting into Parquet shards in %s\n", steps, shards)
	src, err := coco.Open(ann, imgs, coco.Options{})
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	desc := shard.Source{Kind: "coco", Args: map[string]string{"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
	// Small shards so that even this dataset shows the multi-shard layout.
	res, err := writeShards(ctx, stderr, src, desc, convertOpts{out: shards, shardSize: 4 << 20})
	if err != nil {
		return fmt.Errorf("quickstart: convert: %w", err)
	}
	printConvertSummary(w, res, src.Report(), res.elapsed)

	fmt.Fprintf(w, "3/%d inspecting and verifying %s\n\n", steps, shards)
	rep, err := inspect(ctx, shards, true)
	if err != nil {
		return fmt.Errorf("quickstart: inspect: %w", err)
	}
	rep.print(w, 8)
	if !rep.Verify.OK {
		return errors.New("quickstart: verify failed (problems listed above)")
	}
	run, preview := filepath.Join(dir, "run"), filepath.Join(dir, "preview")
	trained := ""
	if epochs > 0 {
		if err := quickstartTrain(ctx, w, stderr, dir, shards, imgs, epochs, 4, steps); err != nil {
			return err
		}
		trained = fmt.Sprintf("  %-40s training run: results.csv, results.png, last/best.safetensors\n"+
			"  %-40s predictions drawn on 4 images + results.json\n", run, preview)
	}
	exe := "segpipe"
	if strings.Contains(os.Args[0], "go-build") {
		exe = "go run ." // started with go run: there is no segpipe binary yet
	}
	fmt.Fprintf(w, `
done in %.1fs. Everything is under %s:
  %-40s synthetic COCO dataset (JPEGs + instances JSON)
  %-40s Parquet shards + manifest.json
%[6]s
next:
  %[5]s inspect %[4]s --verify
      the full report again (all categories, --json for machines)
  %[5]s convert coco --annotations instances_val2017.json --images val2017 --out shards/val2017
  %[5]s convert yolo --data data.yaml --split train --out shards/train
      your own data (--resume continues an interrupted conversion)
  duckdb -c "SELECT count(*), sum(len(instances)) FROM '%[4]s/*.parquet'"
      the shards are plain Parquet: any Arrow tool reads them (see README.md)
  %[5]s predict --weights %[7]s --source %[8]s --out %[9]s
      draw a model's boxes and masks on images and write COCO results (segpipe eval reads them)
  go test ./...
      the test suite
`, time.Since(t0).Seconds(), dir, data, shards, exe, trained, filepath.Join(run, "best.safetensors"), imgs, filepath.Join(dir, "pred"))
	return nil
}

// prepareQuickstartDir creates dir, or empties it when it holds an earlier
// quickstart's output; any other non-empty directory is left alone.
func prepareQuickstartDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(ents) > 0:
		if _, err := os.Stat(filepath.Join(dir, quickstartMarker)); err != nil {
			return fmt.Errorf("%s is not empty and was not made by quickstart; choose another --dir", dir)
		}
		for _, sub := range []string{"dataset", "shards", "run", "preview"} {
			if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, quickstartMarker), []byte("output of segpipe quickstart; rerunning it replaces dataset/, shards/, run/ and preview/\n"), 0o644)
}
