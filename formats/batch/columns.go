package batch

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ColumnsOf reads the buffers of a record's columns shared by the dense
// and the windowed form (every field of Columns but the mask part, Canvas
// left nil when the record has no ColCanvas column), by
// name, into c: the inverse of Build for a consumer that rebuilds a
// record over the same memory (a windowed record expanded into a dense
// one). The buffers are the record's own, not retained: they are valid
// while rec is, and Build takes its own references. Sliced arrays (an
// offset other than 0) are refused: records of a batch stream never are.
func ColumnsOf(rec arrow.RecordBatch, c *Columns) error {
	c.N = int(rec.NumRows())
	var err error
	get := func(dst **memory.Buffer, name string, depth int) {
		if err != nil {
			return
		}
		var col arrow.Array
		if col, err = column(rec, name); err != nil {
			return
		}
		d := col.Data()
		for range depth {
			if d.Offset() != 0 || len(d.Children()) != 1 {
				err = fmt.Errorf("batch: column %s: not a list of %d levels, or sliced", name, depth)
				return
			}
			d = d.Children()[0]
		}
		*dst, err = valuesOf(d, name)
	}
	get(&c.Images, ColImage, 1)
	get(&c.ImageIDs, ColImageID, 0)
	get(&c.OrigHeight, ColOrigHeight, 0)
	get(&c.OrigWidth, ColOrigWidth, 0)
	get(&c.Transforms, ColTransform, 1)
	get(&c.Offsets, ColBoxes, 0)
	get(&c.Boxes, ColBoxes, 2)
	get(&c.Classes, ColClasses, 1)
	get(&c.IsCrowd, ColIsCrowd, 1)
	get(&c.BoxesPerImage, ColBoxesPerImage, 0)
	c.Canvas = nil
	if HasCanvas(rec.Schema()) {
		get(&c.Canvas, ColCanvas, 1)
	}
	if err != nil {
		return err
	}
	offs := arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())
	if len(offs) < c.N+1 {
		return fmt.Errorf("batch: %d box offsets for %d images", len(offs), c.N)
	}
	c.SumN = int(offs[c.N])
	return nil
}

// valuesOf returns buffer 1 (the values, or a list's offsets) of an
// unsliced array.
func valuesOf(d arrow.ArrayData, name string) (*memory.Buffer, error) {
	if d.Offset() != 0 || len(d.Buffers()) < 2 {
		return nil, fmt.Errorf("batch: column %s: unexpected layout (offset %d)", name, d.Offset())
	}
	b := d.Buffers()[1]
	if b == nil {
		b = memory.NewBufferBytes(nil)
	}
	return b, nil
}
