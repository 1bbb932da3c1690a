package batch

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Instances is a view of a training batch's per-instance columns, split by
// image: the one reader of boxes, classes, masks and crowd flags. Boxes,
// Classes, Masks and IsCrowd alias the record's buffers and stay valid
// until the caller releases the record; only BoxesPerImage is converted
// (N small integers).
type Instances struct {
	// BoxesPerImage has one count per image; its sum is N.
	BoxesPerImage []int
	// Boxes holds N xyxy boxes in input-canvas pixels, [N, 4].
	Boxes []float32
	// Classes holds N class ids.
	Classes []int32
	// Masks is the {0,1} stack on the prototype grid, [N, Hp, Wp].
	Masks []uint8
	// IsCrowd holds N flags; 1 marks a crowd region.
	IsCrowd []uint8
}

// InstancesOf views rec's instance columns, checking that their per-image
// splits agree.
func InstancesOf(rec arrow.RecordBatch) (*Instances, error) { return instancesOf(rec, true) }

// InstancesWithoutMasks is InstancesOf for a consumer whose masks come
// separately — a windowed record (IsWindowed, read with MaskWindowsOf) —
// or that does not read them: every field but Masks, which is nil.
func InstancesWithoutMasks(rec arrow.RecordBatch) (*Instances, error) { return instancesOf(rec, false) }

func instancesOf(rec arrow.RecordBatch, withMasks bool) (*Instances, error) {
	col := func(name string) (arrow.Array, error) { return column(rec, name) }
	bpiCol, err := col(ColBoxesPerImage)
	if err != nil {
		return nil, err
	}
	bpi, ok := bpiCol.(*array.Int32)
	if !ok {
		return nil, fmt.Errorf("batch: column %s is %s, not int32", ColBoxesPerImage, bpiCol.DataType())
	}
	boxesCol, err := col(ColBoxes)
	if err != nil {
		return nil, err
	}
	boxes, ok := boxesCol.(*array.List)
	if !ok {
		return nil, fmt.Errorf("batch: column %s is %s, not a list", ColBoxes, boxesCol.DataType())
	}
	fsl, ok := boxes.ListValues().(*array.FixedSizeList)
	if !ok {
		return nil, fmt.Errorf("batch: column %s holds %s, not fixed-size lists", ColBoxes, boxes.ListValues().DataType())
	}
	coords, ok := fsl.ListValues().(*array.Float32)
	if !ok {
		return nil, fmt.Errorf("batch: column %s holds %s coordinates, not float32", ColBoxes, fsl.ListValues().DataType())
	}
	clsCol, err := col(ColClasses)
	if err != nil {
		return nil, err
	}
	cls, ok := clsCol.(*array.List)
	if !ok {
		return nil, fmt.Errorf("batch: column %s is %s, not a list", ColClasses, clsCol.DataType())
	}
	clsVals, ok := cls.ListValues().(*array.Int32)
	if !ok {
		return nil, fmt.Errorf("batch: column %s holds %s, not int32", ColClasses, cls.ListValues().DataType())
	}
	var masks Stack
	if withMasks {
		if masks, err = MaskStack(rec); err != nil {
			if IsWindowed(rec.Schema()) {
				return nil, fmt.Errorf("batch: the record's masks are windowed (read them with MaskWindowsOf): %w", err)
			}
			return nil, err
		}
	}

	n := bpi.Len()
	t := &Instances{BoxesPerImage: make([]int, n)}
	offs := boxes.Offsets()
	if len(offs) != n+1 {
		return nil, fmt.Errorf("batch: %d images but %d box offsets", n, len(offs))
	}
	for i, c := range bpi.Int32Values() {
		if int(offs[i+1]-offs[i]) != int(c) {
			return nil, fmt.Errorf("batch: image %d: boxes_per_image %d, box list holds %d", i, c, offs[i+1]-offs[i])
		}
		t.BoxesPerImage[i] = int(c)
	}
	lo, hi := int(offs[0]), int(offs[n])
	base := fsl.Data().Offset()
	vals := coords.Float32Values()
	if (base+hi)*4 > len(vals) {
		return nil, fmt.Errorf("batch: box values hold %d coordinates, need %d", len(vals), (base+hi)*4)
	}
	t.Boxes = vals[(base+lo)*4 : (base+hi)*4]
	co := cls.Offsets()
	if len(co) != n+1 || co[0] != offs[0] || co[n] != offs[n] {
		return nil, fmt.Errorf("batch: class offsets disagree with box offsets")
	}
	cv := clsVals.Int32Values()
	if hi > len(cv) {
		return nil, fmt.Errorf("batch: record holds %d classes, need %d", len(cv), hi)
	}
	t.Classes = cv[lo:hi]
	if withMasks {
		if len(masks.Shape) != 2 {
			return nil, fmt.Errorf("batch: masks have shape %v, want [Hp, Wp]", masks.Shape)
		}
		hw := masks.Shape[0] * masks.Shape[1]
		if len(masks.Offsets) != n+1 || masks.Offsets[0] != offs[0] || masks.Offsets[n] != offs[n] || hi*hw > len(masks.Data) {
			return nil, fmt.Errorf("batch: mask stack does not match the box lists")
		}
		t.Masks = masks.Data[lo*hw : hi*hw]
	}
	crowd, err := CrowdFlags(rec)
	if err != nil {
		return nil, err
	}
	if hi > len(crowd) {
		return nil, fmt.Errorf("batch: record holds %d crowd flags, need %d", len(crowd), hi)
	}
	t.IsCrowd = crowd[lo:hi]
	return t, nil
}
