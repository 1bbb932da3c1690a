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
	return targetsOf(batch.InstancesOf(rec))
}

// TargetsWithoutMasks is TargetsFromRecord for a record whose masks come
// separately — a windowed one (batch.IsWindowed), whose masks are expanded
// elsewhere, on the device or into a host buffer — through
// batch.InstancesWithoutMasks: Masks is nil until the caller sets it (or
// passes the expanded stack to DeviceTargets.AdoptExpanded).
func TargetsWithoutMasks(rec arrow.RecordBatch) (*Targets, error) {
	return targetsOf(batch.InstancesWithoutMasks(rec))
}

func targetsOf(in *batch.Instances, err error) (*Targets, error) {
	if err != nil {
		return nil, fmt.Errorf("loss: %w", err)
	}
	return in, nil
}
