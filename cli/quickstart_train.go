package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
	"github.com/segpipe/segpipe/trainer/train"
)

// quickstartTrainConfig is the smoke tier (trainer/configs/smoke.json):
// a few CPU epochs of variant n at 128 px, enough to exercise every step
// of training, not to learn much.
func quickstartTrainConfig() train.Config {
	c := train.DefaultConfig()
	c.Variant, c.Epochs, c.Batch, c.Imgsz, c.CloseMosaic = "n", 3, 8, 128, 1
	return c
}

// quickstartTrain continues quickstart after the shards exist: train
// (validating the EMA model every epoch), then preview predictions on the
// first images. Steps are numbered from first of total.
func quickstartTrain(ctx context.Context, w, stderr io.Writer, dir, shards, images string, epochs, first, total int) error {
	run, preview := filepath.Join(dir, "run"), filepath.Join(dir, "preview")
	cfg := quickstartTrainConfig()
	cfg.Epochs = epochs
	cfg.CloseMosaic = min(cfg.CloseMosaic, epochs-1)
	fmt.Fprintf(w, "%d/%d training YOLO26-%s-seg for %d epochs at %d px on the CPU into %s\n", first, total, cfg.Variant, cfg.Epochs, cfg.Imgsz, run)
	r, err := train.Resolve(train.Invocation{Base: &cfg, Out: run, Settings: map[string]string{"shards": shards}})
	if err != nil {
		return fmt.Errorf("quickstart: train: %w", err)
	}
	src, err := pipeline.OpenShards(shards)
	if err != nil {
		return fmt.Errorf("quickstart: train: %w", err)
	}
	defer src.Close()
	opt := r.Options
	opt.Config.Shards = absPath(shards)
	opt.Train, opt.Categories = train.Local(src), src.Manifest().Categories
	opt.NewProgress = func(what string, n int) train.Progress {
		return &trainProgress{p: newProgress(stderr, what, int64(n), 0)}
	}
	sum, err := train.Run(ctx, opt)
	if err != nil {
		return fmt.Errorf("quickstart: train: %w", err)
	}
	last := sum.Epochs[len(sum.Epochs)-1]
	fmt.Fprintf(w, "%d/%d validated the EMA model each epoch: last box mAP50 %.3f, mask mAP50 %.3f (curves: %s)\n"+
		"    a %d-epoch smoke run exercises every step but learns little: real runs take hundreds of epochs\n",
		first+1, total, last.BoxMAP50, last.MaskMAP50, filepath.Join(run, train.PlotFile), cfg.Epochs)
	m, meta, err := model.OpenCheckpoint(filepath.Join(run, train.LastFile))
	if err != nil {
		return fmt.Errorf("quickstart: preview: %w", err)
	}
	cats, err := train.CheckpointCategories(meta)
	if err != nil {
		return err
	}
	files, err := predict.Sources(images)
	if err != nil {
		return fmt.Errorf("quickstart: preview: %w", err)
	}
	files = files[:min(4, len(files))]
	ps, err := predict.Run(ctx, m, files, preview, predict.Options{Imgsz: cfg.Imgsz, Conf: 0.001, DrawConf: 0.001, Categories: cats})
	if err != nil {
		return fmt.Errorf("quickstart: preview: %w", err)
	}
	fmt.Fprintf(w, "%d/%d previews of %d images (boxes and masks) in %s, COCO results in %s\n", first+2, total, ps.Images, preview, ps.ResultsPath)
	return nil
}
