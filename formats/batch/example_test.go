package batch_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/testenv/exampledata"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// Reading one batch image by image: InstancesOf views the instance
// columns (boxes, classes, the {0,1} mask stack, crowd flags) and splits
// them by BoxesPerImage; ImagesOf gives each row's provenance. Every slice
// aliases the record, so it is read before the record is released.
func ExampleInstancesOf() {
	dir, err := os.MkdirTemp("", "segpipe-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	shards, err := exampledata.Shards(dir, 8, 160)
	if err != nil {
		log.Fatal(err)
	}
	src, err := pipeline.OpenShards(shards)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	aug := augment.DefaultConfig()
	aug.ImgSz = 128
	l, err := pipeline.New(context.Background(), src, pipeline.Config{BatchSize: 4, Workers: 1, Start: order.State{Seed: 3}, Augment: aug})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	rec, err := l.Next(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Release()

	in, err := batch.InstancesOf(rec)
	if err != nil {
		log.Fatal(err)
	}
	masks, err := batch.MaskStack(rec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mask grid:", masks.Shape) // the prototype grid, stride 4
	first := 0
	for i, n := range in.BoxesPerImage {
		area := 0
		for k := first; k < first+n; k++ {
			for _, v := range masks.At(k) {
				area += int(v)
			}
		}
		ok := n == 0 || area > 0
		fmt.Printf("image %d: instances %d..%d, masks painted: %v\n", i, first, first+n, ok)
		first += n
	}
	fmt.Println("classes:", len(in.Classes) == first, "boxes:", len(in.Boxes) == 4*first)
	// Output:
	// mask grid: [32 32]
	// image 0: instances 0..21, masks painted: true
	// image 1: instances 21..25, masks painted: true
	// image 2: instances 25..32, masks painted: true
	// image 3: instances 32..37, masks painted: true
	// classes: true boxes: true
}
