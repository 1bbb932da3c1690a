package loss

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
)

// TargetsFromRecord views a training-batch record (the formats/batch
// contract) as loss targets without copying, through batch.InstancesOf:
// Boxes, Classes and Masks alias the record's buffers and stay valid until
// the caller releases the record.
func TargetsFromRecord(rec arrow.RecordBatch) (*Targets, error) {
	in, err := batch.InstancesOf(rec)
	if err != nil {
		return nil, fmt.Errorf("loss: %w", err)
	}
	return &Targets{BoxesPerImage: in.BoxesPerImage, Classes: in.Classes, Boxes: in.Boxes, Masks: in.Masks, IsCrowd: in.IsCrowd}, nil
}
