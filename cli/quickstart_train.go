package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/configs"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
	"github.com/segpipe/segpipe/trainer/train"
)

// quickstartClasses is the category count of the quickstart's dataset.
const quickstartClasses = 2

// quickstartSchedule is trainer/configs/quickstart.json, the file a user
// reads and can pass to `segpipe train --config`: a schedule that learns
// from random weights in minutes. The reference recipe does not: its
// warmup lasts at least 100 iterations and accumulates to a batch of 64,
// so a few hundred iterations are nearly all warmup at a tiny lr with a
// handful of optimiser steps. There every batch of 8 is a step (nbs 8),
// AdamW starts at its full lr, and mosaic is off because the shapes are
// already centred and whole.
var quickstartSchedule = mustQuickstartSchedule()

// quickstartEpochs is the default --epochs, the file's: on the easy set,
// mask mAP50 is near 0 for two or three epochs and above 0.9 by the
// sixth, about a minute of 2 CPU cores.
var quickstartEpochs = quickstartSchedule.Epochs

// quickstartTrainConfig returns a copy of the quickstart's schedule.
func quickstartTrainConfig() train.Config { return quickstartSchedule }

// mustQuickstartSchedule parses the embedded schedule as
// train.Config.LoadConfig reads a file: over the defaults, unknown keys
// refused. The bytes are compiled in, not read from a user, and a test
// parses them, so a failure is a defect of the build itself: it stops the
// program at once (as regexp.MustCompile does) rather than letting
// quickstart train with some other schedule.
func mustQuickstartSchedule() train.Config {
	c := train.DefaultConfig()
	dec := json.NewDecoder(strings.NewReader(configs.Quickstart))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		panic(fmt.Sprintf("embedded trainer/configs/quickstart.json: %v", err))
	}
	return c
}

// quickstartTrain continues quickstart after the shards exist: train cfg
// into run (validating the EMA model every epoch on cfg.ValShards), then
// draw predictions on the first validation images into preview. Steps are
// numbered from first of total. It returns the last epoch's results.
func quickstartTrain(ctx context.Context, w, stderr io.Writer, cfg train.Config, run, preview, valImages string, first, total int) (train.Epoch, error) {
	fmt.Fprintf(w, "%d/%d training YOLO26-%s-seg from random weights for %d epochs at %d px on the CPU into %s\n", first, total, cfg.Variant, cfg.Epochs, cfg.Imgsz, run)
	r, err := train.Resolve(train.Invocation{Base: &cfg, Out: run})
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: train: %w", err)
	}
	src, err := pipeline.OpenShards(r.Shards)
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: train: %w", err)
	}
	defer src.Close()
	vs, err := pipeline.OpenShards(r.ValShards)
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: train: %w", err)
	}
	defer vs.Close()
	opt := r.Options
	opt.Train, opt.Val, opt.Categories = train.Local(src), train.Local(vs), src.Manifest().Categories
	opt.NewProgress = func(what string, n int) train.Progress {
		return &trainProgress{p: newProgress(stderr, what, int64(n), 0)}
	}
	sum, err := train.Run(ctx, opt)
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: train: %w", err)
	}
	fmt.Fprintf(w, "%d/%d validated the EMA model after every epoch on the %d held-out validation images (curves: %s):\n",
		first+1, total, vs.Manifest().Rows, filepath.Join(run, train.PlotFile))
	printQuickstartCurve(w, sum.Epochs)
	m, meta, err := model.OpenCheckpoint(filepath.Join(run, train.BestFile))
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: preview: %w", err)
	}
	cats, err := train.CheckpointCategories(meta)
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: preview: %w", err)
	}
	files, err := predict.Sources(valImages)
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: preview: %w", err)
	}
	files = files[:min(4, len(files))]
	// Conf 0.001 keeps every detection in results.json, as evaluation
	// wants; the drawings show only those scoring 0.25 or more.
	ps, err := predict.Run(ctx, m, files, preview, predict.Options{Imgsz: cfg.Imgsz, Conf: 0.001, DrawConf: 0.25, Categories: cats})
	if err != nil {
		return train.Epoch{}, fmt.Errorf("quickstart: preview: %w", err)
	}
	fmt.Fprintf(w, "%d/%d previews of %d images (boxes and masks) in %s, COCO results in %s\n", first+2, total, ps.Images, preview, ps.ResultsPath)
	return sum.Epochs[len(sum.Epochs)-1], nil
}

// printQuickstartCurve prints the validation mAP50 of every epoch, with a
// bar for the mask's, so the rise is visible without opening the plot.
func printQuickstartCurve(w io.Writer, eps []train.Epoch) {
	fmt.Fprintf(w, "    epoch  box mAP50  mask mAP50\n")
	for _, e := range eps {
		if e.MaskMAP50 < 0 {
			continue // not validated that epoch
		}
		line := fmt.Sprintf("    %5d  %9.3f  %10.3f  %s", e.Epoch, e.BoxMAP50, e.MaskMAP50, strings.Repeat("#", int(math.Round(e.MaskMAP50*40))))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}
