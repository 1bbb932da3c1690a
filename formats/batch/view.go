package batch

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Stack is a view of one tensor column of a record as a dense array of Count
// tensors of Shape, back to back in Data, with the per-image split Offsets
// (tensor k of image i is k in [Offsets[i], Offsets[i+1])). Data aliases the
// record's memory.
type Stack struct {
	Data    []byte
	Count   int
	Shape   []int
	Offsets []int32 // len N+1; nil for the image column (one tensor per row)
}

// At returns tensor k of the stack.
func (s Stack) At(k int) []byte {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return s.Data[k*n : (k+1)*n]
}

// ImageTensor returns the image column as a (N, 3, H, W) uint8 view.
func ImageTensor(rec arrow.RecordBatch) (Stack, error) {
	col, err := column(rec, ColImage)
	if err != nil {
		return Stack{}, err
	}
	t, ok := col.(*FixedShapeTensorArray)
	if !ok {
		return Stack{}, fmt.Errorf("batch: column %s is %s, not a fixed_shape_tensor", ColImage, col.DataType())
	}
	return Stack{Data: t.Values(), Count: t.Len(), Shape: t.ExtensionType().(*FixedShapeTensorType).Shape()}, nil
}

// MaskStack returns the masks column as a (sum_N, Hp, Wp) uint8 view plus
// the per-image split.
func MaskStack(rec arrow.RecordBatch) (Stack, error) {
	col, err := column(rec, ColMasks)
	if err != nil {
		return Stack{}, err
	}
	l, ok := col.(*array.List)
	if !ok {
		return Stack{}, fmt.Errorf("batch: column %s is %s, not a list", ColMasks, col.DataType())
	}
	t, ok := l.ListValues().(*FixedShapeTensorArray)
	if !ok {
		return Stack{}, fmt.Errorf("batch: column %s holds %s, not a fixed_shape_tensor", ColMasks, l.ListValues().DataType())
	}
	offs := l.Offsets()
	if len(offs) == 0 {
		offs = []int32{0}
	}
	return Stack{Data: t.Values(), Count: t.Len(), Shape: t.ExtensionType().(*FixedShapeTensorType).Shape(), Offsets: offs}, nil
}

func column(rec arrow.RecordBatch, name string) (arrow.Array, error) {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return nil, fmt.Errorf("batch: record has %d columns named %s", len(idx), name)
	}
	return rec.Column(idx[0]), nil
}

// CrowdFlags returns the iscrowd column's values, one per instance and
// indexed like [MaskStack]'s tensors: 1 marks a crowd instance, whose box
// and mask are a region to ignore rather than an object to find.
func CrowdFlags(rec arrow.RecordBatch) ([]uint8, error) {
	col, err := column(rec, ColIsCrowd)
	if err != nil {
		return nil, err
	}
	l, ok := col.(*array.List)
	if !ok {
		return nil, fmt.Errorf("batch: column %s is %s, not a list", ColIsCrowd, col.DataType())
	}
	v, ok := l.ListValues().(*array.Uint8)
	if !ok {
		return nil, fmt.Errorf("batch: column %s holds %s, not uint8", ColIsCrowd, l.ListValues().DataType())
	}
	return v.Uint8Values(), nil
}
