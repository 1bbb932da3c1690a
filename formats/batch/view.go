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

// Image is one row's provenance: the source image id, its original size,
// and the 2×3 affine (row-major) that maps original pixels to the canvas.
type Image struct {
	ID           int64
	OrigH, OrigW int
	Transform    [6]float64
}

// ImagesOf returns the rows' provenance columns, one Image per row.
func ImagesOf(rec arrow.RecordBatch) ([]Image, error) {
	var cols [4]arrow.Array
	for i, name := range []string{ColImageID, ColOrigHeight, ColOrigWidth, ColTransform} {
		c, err := column(rec, name)
		if err != nil {
			return nil, err
		}
		cols[i] = c
	}
	ids, ok1 := cols[0].(*array.Int64)
	hs, ok2 := cols[1].(*array.Int32)
	ws, ok3 := cols[2].(*array.Int32)
	xf, ok4 := cols[3].(*array.FixedSizeList)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("batch: provenance columns have types %s, %s, %s, %s", cols[0].DataType(), cols[1].DataType(), cols[2].DataType(), cols[3].DataType())
	}
	xv, ok := xf.ListValues().(*array.Float64)
	if !ok {
		return nil, fmt.Errorf("batch: column %s holds %s, not float64", ColTransform, xf.ListValues().DataType())
	}
	n := int(rec.NumRows())
	vals := xv.Float64Values()
	if (xf.Offset()+n)*6 > len(vals) {
		return nil, fmt.Errorf("batch: column %s holds %d values for %d rows", ColTransform, len(vals), n)
	}
	out := make([]Image, n)
	for i := range out {
		out[i] = Image{ID: ids.Value(i), OrigH: int(hs.Value(i)), OrigW: int(ws.Value(i))}
		off := xf.Offset() + i
		copy(out[i].Transform[:], vals[off*6:off*6+6])
	}
	return out, nil
}

// LiveCanvas returns the live (height, width) of a record's canvas: the
// ColCanvas column's, which every row of a batch shares, or the whole
// canvas (ok false) for a record without that column. A consumer views
// the images as image[..., :h, :w] and the masks as masks[:, :h/stride,
// :w/stride], without copying.
func LiveCanvas(rec arrow.RecordBatch) (h, w int, ok bool, err error) {
	if !HasCanvas(rec.Schema()) {
		t, err := ImageTensor(rec)
		if err != nil {
			return 0, 0, false, err
		}
		return t.Shape[1], t.Shape[2], false, nil
	}
	col, err := column(rec, ColCanvas)
	if err != nil {
		return 0, 0, false, err
	}
	l, ok := col.(*array.FixedSizeList)
	if !ok {
		return 0, 0, false, fmt.Errorf("batch: column %s is %s, not a fixed_size_list", ColCanvas, col.DataType())
	}
	v, ok := l.ListValues().(*array.Int32)
	if !ok || l.Len() == 0 {
		return 0, 0, false, fmt.Errorf("batch: column %s: %d rows of %s", ColCanvas, l.Len(), l.ListValues().DataType())
	}
	vals := v.Int32Values()
	if (l.Offset()+l.Len())*2 > len(vals) {
		return 0, 0, false, fmt.Errorf("batch: column %s holds %d values for %d rows", ColCanvas, len(vals), l.Len())
	}
	vals = vals[2*l.Offset() : 2*(l.Offset()+l.Len())]
	for i := 2; i < len(vals); i += 2 {
		if vals[i] != vals[0] || vals[i+1] != vals[1] {
			return 0, 0, false, fmt.Errorf("batch: column %s: row %d's canvas %dx%d, row 0's %dx%d: a batch shares one", ColCanvas, i/2, vals[i], vals[i+1], vals[0], vals[1])
		}
	}
	return int(vals[0]), int(vals[1]), true, nil
}
