package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// Convert throughput against the floor any converter has: reading every
// image file and writing the same bytes once (fsynced). Both run in the
// same benchmark invocation, so their ratio survives a noisy machine.
//
//	go test ./cli -run '^$' -bench 'Convert' -benchtime 5x -count 3
//
// Metrics: images/s and MB/s of image data. With a warm page cache the
// baselines are memory- rather than disk-bound, which makes the ratio a
// strict measure of the converter's own CPU cost.

// BenchmarkConvertSynth converts 500 synthetic COCO-like images. A
// benchmark with sub-benchmarks runs its body once, so the dataset is
// generated once per invocation.
func BenchmarkConvertSynth(b *testing.B) {
	dir := b.TempDir()
	cfg := synth.Config{Images: 500, Seed: 1}
	if err := synth.Generate(dir, cfg); err != nil {
		b.Fatal(err)
	}
	benchConvert(b, synth.AnnotationsPath(dir, cfg), synth.ImagesDir(dir))
}

func BenchmarkConvertCocoTiny(b *testing.B) {
	root := repoShared(b, "data/coco-tiny")
	benchConvert(b, filepath.Join(root, "annotations", "instances_train2017.json"), filepath.Join(root, "train2017"))
}

func benchConvert(b *testing.B, ann, imgs string) {
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.DiscardHandler))
	ds, err := coco.Open(ann, imgs, coco.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var files []string
	var total int64
	err = ds.Images(context.Background(), 0, func(img *shard.Image) error {
		files = append(files, filepath.Join(imgs, img.FileName))
		total += int64(len(img.Bytes))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	n := len(files)
	report := func(b *testing.B) {
		secs := b.Elapsed().Seconds()
		b.ReportMetric(float64(n*b.N)/secs, "images/s")
		b.ReportMetric(float64(total*int64(b.N))/1e6/secs, "MB/s")
	}

	b.Run("convert", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			out := b.TempDir()
			src, err := coco.Open(ann, imgs, coco.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := writeShards(context.Background(), &bytes.Buffer{}, src, shard.Source{Kind: "coco"}, convertOpts{out: out, shardSize: 256 << 20}); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("baseline-read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, f := range files {
				if _, err := os.ReadFile(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})
	b.Run("baseline-copy", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			out, err := os.Create(filepath.Join(b.TempDir(), "copy"))
			if err != nil {
				b.Fatal(err)
			}
			for _, f := range files {
				p, err := os.ReadFile(f)
				if err == nil {
					_, err = out.Write(p)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := out.Sync(); err != nil {
				b.Fatal(err)
			}
			out.Close()
		}
		report(b)
	})
}
