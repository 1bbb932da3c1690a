package arena

import (
	"context"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
)

// Dataset is what a parsed dataset of any annotation format holds: its
// category table, the images it emits and the report of what it skipped.
// coco.Dataset and yolo.Dataset embed it, each adding its own Open, Stats
// and the documented order of Images.
type Dataset struct {
	Cats []shard.Category
	Src  *Source
	Rep  *datasets.Report
}

// Categories returns the category table sorted by original id (a YOLO
// label file's class number), Index contiguous from 0. The slice is
// shared; do not modify it.
func (d *Dataset) Categories() []shard.Category { return d.Cats }

// Len is the number of images Images emits (after skipping bad ones).
func (d *Dataset) Len() int { return len(d.Src.Images) }

// Report holds the counts of skipped items by reason.
func (d *Dataset) Report() *datasets.Report { return d.Rep }

// RowSizes returns the shard writer's size estimate of every row Images
// emits, without reading image files (see shard.PlanShards).
func (d *Dataset) RowSizes(ctx context.Context) ([]int64, error) { return d.Src.RowSizes(ctx) }
