package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// An Ultralytics segmentation recipe, set from Go: each of its data
// options is a plain field of pipeline.Config (dataset options, batch
// shape) or augment.Config (the one table of augmentation settings,
// whose json names are Ultralytics' own). Every draw comes from the seed,
// so the batches, multi_scale's sides included, are the same at any
// worker count.
func Example_ultralyticsRecipe() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src, err := pipeline.OpenShards(writeSynthShards(dir, 16))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()

	aug := augment.DefaultConfig() // the other settings keep Ultralytics' defaults
	aug.ImgSz = 128
	aug.Mosaic = 1      // mosaic: 1.0
	aug.CopyPaste = 0.5 // copy_paste: 0.5
	// copy_paste_mode: "flip" pastes the image's own instances mirrored;
	// "mixup" would paste another image's instead.
	aug.CopyPasteMode = "flip"
	aug.Mixup = 0.2  // mixup: 0.2
	aug.Cutmix = 0.2 // cutmix: 0.2
	aug.FlipUD = 0.5 // flipud: 0.5
	aug.BGR = 0.1    // bgr: 0.1
	// scale: 0.5 draws the factor from [0.5, 1.5]; Ultralytics' range form
	// scale=(0.5, 1.5) is ScaleMin/ScaleMax instead.
	aug.Scale = 0.5
	aug.MaskRule = "ultralytics" // polygon2mask's cells; "exact" is the default

	var keep []int32 // classes: class indices 0 to 39
	for c := range int32(40) {
		keep = append(keep, c)
	}
	cfg := pipeline.Config{
		BatchSize:   4,
		Workers:     2,
		Start:       order.State{Seed: 3},
		Augment:     aug,
		MultiScale:  0.5,  // multi_scale: each batch's side drawn from 64..192 on the 32 px grid
		Classes:     keep, // classes: instances of other classes are left out
		SingleClass: true, // single_cls: every instance kept becomes class 0
		Fraction:    0.5,  // fraction: the first 8 of the 16 images
	}
	if err := cfg.Validate(); err != nil {
		log.Fatal(err)
	}
	l, err := pipeline.New(context.Background(), src, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("canvas side:", cfg.CanvasSide())
	for i := range 2 {
		rec, err := l.Next(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		printRecipeBatch(i, rec)
		rec.Release()
	}
	// fraction 0.5 of 16 images is 8: two batches make the epoch.
	_, err = l.Next(context.Background())
	fmt.Println("epoch over after two batches:", err == io.EOF)
	// Output:
	// canvas side: 192
	// batch 0: 4 images, live canvas 160x160, instances per image [7 4 14 6], classes [0], masks of 0 and 1: true
	// batch 1: 4 images, live canvas 128x128, instances per image [7 9 15 9], classes [0], masks of 0 and 1: true
	// epoch over after two batches: true
}

// printRecipeBatch prints the stable facts of a training batch: its size,
// its live canvas, its instances per image and their classes, and whether
// every mask cell is 0 or 1.
func printRecipeBatch(i int, rec arrow.RecordBatch) {
	h, w, _, err := batch.LiveCanvas(rec)
	if err != nil {
		log.Fatal(err)
	}
	in, err := batch.InstancesOf(rec)
	if err != nil {
		log.Fatal(err)
	}
	binary := !slices.ContainsFunc(in.Masks, func(v uint8) bool { return v > 1 })
	fmt.Printf("batch %d: %d images, live canvas %dx%d, instances per image %v, classes %v, masks of 0 and 1: %v\n",
		i, rec.NumRows(), h, w, in.BoxesPerImage, slices.Compact(slices.Sorted(slices.Values(in.Classes))), binary)
}

// Validation as Ultralytics validates: Rect sorts the images by aspect
// ratio and letterboxes each batch to its own rectangle (on the 32 px
// grid, half a stride of padding), carried at the top left of the
// stream's square canvas with its live (height, width) in the canvas
// column.
func Example_validationRect() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src, err := pipeline.OpenShards(writeSynthShards(dir, 8))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	cfg := pipeline.Config{BatchSize: 4, Workers: 2, Val: true, Rect: true, Augment: aug}
	l, err := pipeline.New(context.Background(), src, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("canvas side:", cfg.CanvasSide())
	for i := range 2 {
		rec, err := l.Next(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		h, w, _, err := batch.LiveCanvas(rec)
		if err != nil {
			log.Fatal(err)
		}
		imgs, err := batch.ImagesOf(rec)
		if err != nil {
			log.Fatal(err)
		}
		var sizes []string
		for _, im := range imgs {
			sizes = append(sizes, fmt.Sprintf("%dx%d", im.OrigH, im.OrigW))
		}
		fmt.Printf("batch %d: images %v, live canvas %dx%d\n", i, sizes, h, w)
		rec.Release()
	}
	// Output:
	// canvas side: 160
	// batch 0: images [106x160 106x160 106x160 120x160], live canvas 128x160
	// batch 1: images [120x160 160x106 160x106 160x106], live canvas 160x160
}
