package loss

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/segpipe/segpipe/formats/batch"
)

// TargetsFromRecord views a training-batch record (the formats/batch
// contract) as loss targets without copying: Boxes, Classes and Masks
// alias the record's buffers and stay valid until the caller releases the
// record. Only BoxesPerImage is converted (N small integers).
func TargetsFromRecord(rec arrow.RecordBatch) (*Targets, error) {
	col := func(name string) (arrow.Array, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("loss: batch record has %d columns named %s", len(idx), name)
		}
		return rec.Column(idx[0]), nil
	}
	bpiCol, err := col(batch.ColBoxesPerImage)
	if err != nil {
		return nil, err
	}
	bpi, ok := bpiCol.(*array.Int32)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s is %s, not int32", batch.ColBoxesPerImage, bpiCol.DataType())
	}
	boxesCol, err := col(batch.ColBoxes)
	if err != nil {
		return nil, err
	}
	boxes, ok := boxesCol.(*array.List)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s is %s, not a list", batch.ColBoxes, boxesCol.DataType())
	}
	fsl, ok := boxes.ListValues().(*array.FixedSizeList)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s holds %s, not fixed-size lists", batch.ColBoxes, boxes.ListValues().DataType())
	}
	coords, ok := fsl.ListValues().(*array.Float32)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s holds %s coordinates, not float32", batch.ColBoxes, fsl.ListValues().DataType())
	}
	clsCol, err := col(batch.ColClasses)
	if err != nil {
		return nil, err
	}
	cls, ok := clsCol.(*array.List)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s is %s, not a list", batch.ColClasses, clsCol.DataType())
	}
	clsVals, ok := cls.ListValues().(*array.Int32)
	if !ok {
		return nil, fmt.Errorf("loss: batch column %s holds %s, not int32", batch.ColClasses, cls.ListValues().DataType())
	}
	masks, err := batch.MaskStack(rec)
	if err != nil {
		return nil, fmt.Errorf("loss: %w", err)
	}

	n := bpi.Len()
	t := &Targets{BoxesPerImage: make([]int, n)}
	offs := boxes.Offsets()
	if len(offs) != n+1 {
		return nil, fmt.Errorf("loss: batch has %d images but %d box offsets", n, len(offs))
	}
	for i, c := range bpi.Int32Values() {
		if int(offs[i+1]-offs[i]) != int(c) {
			return nil, fmt.Errorf("loss: batch image %d: boxes_per_image %d, box list holds %d", i, c, offs[i+1]-offs[i])
		}
		t.BoxesPerImage[i] = int(c)
	}
	lo, hi := int(offs[0]), int(offs[n])
	base := fsl.Data().Offset()
	vals := coords.Float32Values()
	if (base+hi)*4 > len(vals) {
		return nil, fmt.Errorf("loss: batch box values hold %d coordinates, need %d", len(vals), (base+hi)*4)
	}
	t.Boxes = vals[(base+lo)*4 : (base+hi)*4]
	co := cls.Offsets()
	if len(co) != n+1 || co[0] != offs[0] || co[n] != offs[n] {
		return nil, fmt.Errorf("loss: batch class offsets disagree with box offsets")
	}
	cv := clsVals.Int32Values()
	if hi > len(cv) {
		return nil, fmt.Errorf("loss: batch holds %d classes, need %d", len(cv), hi)
	}
	t.Classes = cv[lo:hi]
	if len(masks.Shape) != 2 {
		return nil, fmt.Errorf("loss: batch masks have shape %v, want [Hp, Wp]", masks.Shape)
	}
	hw := masks.Shape[0] * masks.Shape[1]
	if len(masks.Offsets) != n+1 || masks.Offsets[0] != offs[0] || masks.Offsets[n] != offs[n] || hi*hw > len(masks.Data) {
		return nil, fmt.Errorf("loss: batch mask stack does not match the box lists")
	}
	t.Masks = masks.Data[lo*hw : hi*hw]
	crowd, err := batch.CrowdFlags(rec)
	if err != nil {
		return nil, fmt.Errorf("loss: %w", err)
	}
	if hi > len(crowd) {
		return nil, fmt.Errorf("loss: batch holds %d crowd flags, need %d", len(crowd), hi)
	}
	t.IsCrowd = crowd[lo:hi]
	return t, nil
}
