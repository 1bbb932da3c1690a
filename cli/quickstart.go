package cli

import (
	"context"
	"encoding/json"
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
	"github.com/segpipe/segpipe/trainer/train"
)

// quickstartMarker marks a directory as quickstart output, so a rerun may
// replace it without risking a user's files.
const quickstartMarker = ".segpipe-quickstart"

// quickstartConfigName is the training config quickstart writes into its
// directory.
const quickstartConfigName = "train.json"

func quickstartCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "quickstart",
		Usage:     "try segpipe end to end on a small synthetic dataset",
		UsageText: "segpipe quickstart [--dir DIR] [--images N] [--epochs E]",
		Description: "Generates two small seeded COCO-format datasets of plain coloured shapes (JPEG\n" +
			"images and their exact polygons, 2 classes): a training set and a held-out validation\n" +
			"set a quarter its size. Converts both into Parquet shards, inspects and verifies them,\n" +
			"trains YOLO26-n-seg from random weights for 6 CPU epochs at 128 px (validating box\n" +
			"and mask mAP on the validation set every epoch: near 0 at first, above 0.9 by the\n" +
			"end), draws predictions on a few validation images, and prints where everything\n" +
			"went, what the numbers mean and what to run next. It needs nothing but this binary\n" +
			"and takes one to a few minutes on 2 cores (--epochs 0 skips training: seconds). The\n" +
			"schedule is trainer/configs/quickstart.json. Rerunning replaces the previous\n" +
			"quickstart output in --dir; a non-empty directory it did not create is refused.\n\n" +
			"Example:\n  segpipe quickstart --dir /tmp/segpipe-quickstart",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "dir", Value: "segpipe-quickstart", Usage: "working `DIR` for the dataset and shards"},
			&ucli.IntFlag{Name: "images", Value: 200, Usage: "number of synthetic training `N` images (N/4 more for validation)"},
			&ucli.IntFlag{Name: "epochs", Value: quickstartEpochs, Usage: "training epochs `E` (0: stop after converting)"},
		},
		Action: func(ctx context.Context, c *ucli.Command) error {
			if err := checkRanges(c, intRange{"images", 1, 100000}, intRange{"epochs", 0, 1000}); err != nil {
				return err
			}
			n, epochs := int(c.Int("images")), int(c.Int("epochs"))
			return quickstart(ctx, c.Root().Writer, c.Root().ErrWriter, c.String("dir"), n, epochs)
		},
	}
}

// quickstartSet is one split of the quickstart's dataset.
type quickstartSet struct {
	name, data, shards string
	cfg                synth.Config
}

// quickstartSets are the training split and a held-out validation split
// (another seed, a quarter of the size), so the mAP the run reports is
// measured on images it never trained on.
func quickstartSets(dir string, n int) []quickstartSet {
	sets := []quickstartSet{{name: "train"}, {name: "val"}}
	for i := range sets {
		s := &sets[i]
		s.data, s.shards = filepath.Join(dir, "dataset", s.name), filepath.Join(dir, "shards", s.name)
		// Small images: the model sees them at 128 px anyway, and
		// smaller JPEGs decode faster.
		s.cfg = synth.Config{Images: n, Seed: 1, Split: s.name, Easy: true, Classes: quickstartClasses, MaxSide: 256}
	}
	sets[1].cfg.Images, sets[1].cfg.Seed = max(1, n/4), 2
	return sets
}

func quickstart(ctx context.Context, w, stderr io.Writer, dir string, n, epochs int) error {
	if err := prepareQuickstartDir(dir); err != nil {
		return err
	}
	t0 := time.Now()
	sets := quickstartSets(dir, n)
	tr, val := sets[0], sets[1]
	steps := 3
	if epochs > 0 {
		steps = 6
	}

	fmt.Fprintf(w, "1/%d synthesising %d training and %d validation COCO-format images (%d classes of plain shapes) into %s\n",
		steps, tr.cfg.Images, val.cfg.Images, quickstartClasses, filepath.Join(dir, "dataset"))
	for _, s := range sets {
		if err := synth.Generate(s.data, s.cfg); err != nil {
			return fmt.Errorf("quickstart: synthesise %s: %w", s.name, err)
		}
	}

	fmt.Fprintf(w, "2/%d converting them into Parquet shards in %s\n", steps, filepath.Join(dir, "shards"))
	for _, s := range sets {
		ann, imgs := synth.AnnotationsPath(s.data, s.cfg), synth.ImagesDir(s.data)
		src, err := coco.Open(ann, imgs, coco.Options{})
		if err != nil {
			return fmt.Errorf("quickstart: %s: %w", s.name, err)
		}
		desc := shard.Source{Kind: "coco", Args: map[string]string{"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
		// Small shards so that even this dataset shows the multi-shard layout.
		res, err := writeShards(ctx, stderr, src, desc, convertOpts{out: s.shards, shardSize: 256 << 10})
		if err != nil {
			return fmt.Errorf("quickstart: convert %s: %w", s.name, err)
		}
		printConvertSummary(w, res, src.Report(), res.elapsed)
	}

	fmt.Fprintf(w, "3/%d inspecting and verifying %s\n\n", steps, tr.shards)
	rep, err := inspect(ctx, tr.shards, true)
	if err != nil {
		return fmt.Errorf("quickstart: inspect: %w", err)
	}
	rep.print(w, 8)
	if !rep.Verify.OK {
		return errors.New("quickstart: verify failed (problems listed above)")
	}
	if rep, err := inspect(ctx, val.shards, true); err != nil {
		return fmt.Errorf("quickstart: inspect: %w", err)
	} else if !rep.Verify.OK {
		return fmt.Errorf("quickstart: verify failed for %s (segpipe inspect %[1]s --verify lists the problems)", val.shards)
	}
	exe := "segpipe"
	if strings.Contains(os.Args[0], "go-build") {
		exe = "go run ." // started with go run: there is no segpipe binary yet
	}
	// The schedule goes next to the data, with the data's paths, so that
	// `segpipe train --config` repeats or extends the run from anywhere.
	tc := quickstartTrainConfig()
	if epochs > 0 {
		tc.Epochs = epochs
	}
	tc.Shards, tc.ValShards = absPath(tr.shards), absPath(val.shards)
	tcFile := filepath.Join(dir, quickstartConfigName)
	b, err := json.MarshalIndent(tc, "", "  ")
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	if err := os.WriteFile(tcFile, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	run, preview := filepath.Join(dir, "run"), filepath.Join(dir, "preview")
	var last train.Epoch
	if epochs > 0 {
		if last, err = quickstartTrain(ctx, w, stderr, tc, run, preview, synth.ImagesDir(val.data), 4, steps); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\ndone in %.1fs. Everything is under %s:\n", time.Since(t0).Seconds(), dir)
	fmt.Fprintf(w, "  %-40s synthetic COCO datasets (JPEGs + instances JSON): train/ (%d images), val/ (%d, held out)\n",
		filepath.Join(dir, "dataset"), tr.cfg.Images, val.cfg.Images)
	fmt.Fprintf(w, "  %-40s Parquet shards of each, with manifest.json\n", filepath.Join(dir, "shards"))
	if epochs > 0 {
		fmt.Fprintf(w, "  %-40s training run: results.csv, results.png, last/best.safetensors\n", run)
		fmt.Fprintf(w, "  %-40s predictions drawn on 4 validation images + results.json\n", preview)
		fmt.Fprintf(w, `
what the numbers mean:
  mAP50 (mean average precision at IoU 0.5) scores the model's detections against the true
  shapes: a detection is a hit when its mask (its box, for box mAP50) overlaps a true shape by at
  least half of their union; precision is averaged over every recall level and over the %d
  classes. 0 finds nothing; 1 finds every shape with no false alarm. This run ended at mask
  mAP50 %.3f (box %.3f) on %d validation images it never trained on. Expect about 0 for the
  first two or three epochs, while the model learns what an object is, then a steep rise to
  above 0.9 by epoch %d; a curve that stays at 0 means something is broken. These shapes are
  easy on purpose: real data from random weights takes hundreds of epochs at 640 px (a GPU:
  --device cuda).
`, quickstartClasses, last.MaskMAP50, last.BoxMAP50, val.cfg.Images, quickstartEpochs)
	}
	fmt.Fprintf(w, "\nnext:\n")
	if epochs > 0 {
		pred := filepath.Join(dir, "pred")
		fmt.Fprintf(w, `  %[1]s train --config %[2]s --epochs 12 --out %[3]s
      train again, longer (%[2]s holds the schedule and the data; flags override it)
  %[1]s predict --weights %[4]s --source %[5]s --imgsz %[6]d --conf 0.001 --out %[7]s
  %[1]s eval --annotations %[8]s --detections %[9]s
      predict on the validation images and score the predictions by COCO's rules
`, exe, tcFile, filepath.Join(dir, "run12"), filepath.Join(run, train.BestFile),
			synth.ImagesDir(val.data), tc.Imgsz, pred,
			synth.AnnotationsPath(val.data, val.cfg), filepath.Join(pred, "results.json"))
	} else {
		fmt.Fprintf(w, "  %s train --config %s --out %s\n      train on it: about a minute on 2 cores (%[2]s holds the schedule and the data)\n", exe, tcFile, run)
	}
	fmt.Fprintf(w, `  %[1]s inspect %[2]s --verify
      the full report again (all categories, --json for machines)
  %[1]s convert coco --annotations instances_val2017.json --images val2017 --out shards/val2017
  %[1]s convert yolo --data data.yaml --split train --out shards/train
      your own data (--resume continues an interrupted conversion)
  duckdb -c "SELECT count(*), sum(len(instances)) FROM '%[2]s/*.parquet'"
      the shards are plain Parquet: any Arrow tool reads them (see README.md)
  go test -timeout 20m ./...
      the test suite
`, exe, tr.shards)
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
		for _, sub := range []string{"dataset", "shards", "run", "preview", quickstartConfigName} {
			if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, quickstartMarker), []byte("output of segpipe quickstart; rerunning it replaces dataset/, shards/, run/, preview/ and "+quickstartConfigName+"\n"), 0o644)
}
