package remote

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// Windowed transport: the batch schema with the masks column replaced by
// mask_windows and mask_data, defined in formats/batch (see
// batch.WindowedSchema); the names here are that package's.
const (
	ColMaskWindows = batch.ColMaskWindows
	ColMaskData    = batch.ColMaskData
)

// nDense is the number of batch columns before masks: both transports send
// them unchanged.
const nDense = 9

// expander turns windowed records back into batch records, or checks and
// rebuilds them as windowed records for a consumer that expands them
// itself. Not safe for concurrent use: one per stream.
type expander struct {
	mem     memory.Allocator
	builder *batch.Builder
	grid    raster.Grid
}

// newExpander reads the grid and canvas sizes from a windowed schema.
func newExpander(s *arrow.Schema, mem memory.Allocator) (*expander, error) {
	canvas := batch.HasCanvas(s)
	want := nDense + 2
	if canvas {
		want++ // batch.ColCanvas, last
	}
	if s.NumFields() != want || s.Field(nDense).Name != ColMaskWindows || s.Field(nDense+1).Name != ColMaskData {
		return nil, fmt.Errorf("remote: windowed schema has columns %v", fieldNames(s))
	}
	hp, wp, err := batch.MaskGrid(s)
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	it, ok := s.Field(0).Type.(*batch.FixedShapeTensorType)
	if !ok || len(it.Shape()) != 3 {
		return nil, fmt.Errorf("remote: windowed schema: column %s is %s, not a (3,H,W) tensor", batch.ColImage, s.Field(0).Type)
	}
	sh := it.Shape()
	newBuilder := batch.NewBuilder
	if canvas {
		newBuilder = batch.NewCanvasBuilder
	}
	b, err := newBuilder(sh[1], sh[2], hp, wp)
	if err != nil {
		return nil, err
	}
	return &expander{mem: mem, builder: b, grid: raster.Grid{Rows: hp, Cols: wp, Stride: max(sh[1]/hp, 1)}}, nil
}

func fieldNames(s *arrow.Schema) []string {
	var out []string
	for _, f := range s.Fields() {
		out = append(out, f.Name)
	}
	return out
}

// columns reads a windowed record: the nine shared columns' buffers into
// c (batch.ColumnsOf), the mask part through batch.MaskWindowsOf, its windows as
// raster.Windows, checked to be one per instance with the boxes' split.
func (e *expander) columns(rec arrow.RecordBatch) (c batch.Columns, mw batch.MaskWindows, wins []raster.Window, err error) {
	if err = batch.ColumnsOf(rec, &c); err != nil {
		return c, mw, nil, fmt.Errorf("remote: %w", err)
	}
	n := c.N
	if mw, err = batch.MaskWindowsOf(rec); err != nil {
		return c, mw, nil, fmt.Errorf("remote: %w", err)
	}
	offs := arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())[:n+1]
	for i, o := range mw.Offsets {
		if o != offs[i] {
			return c, mw, nil, fmt.Errorf("remote: column %s: image %d: window offset %d, box offset %d", ColMaskWindows, i, o, offs[i])
		}
	}
	if mw.Rows != e.grid.Rows || mw.Cols != e.grid.Cols {
		return c, mw, nil, fmt.Errorf("remote: windows on a %dx%d grid, stream's is %dx%d", mw.Rows, mw.Cols, e.grid.Rows, e.grid.Cols)
	}
	if wins, err = raster.WindowsOf(mw.Windows); err != nil {
		return c, mw, nil, fmt.Errorf("remote: %w", err)
	}
	return c, mw, wins, nil
}

// expand returns the dense batch record of a windowed one. The result
// shares every column buffer but the masks with rec; the caller owns one
// reference to it and still owns rec.
func (e *expander) expand(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	c, mw, _, err := e.columns(rec)
	if err != nil {
		return nil, err
	}
	if mw.Count() != c.SumN { // ExpandWindows would grow a slice of its own
		return nil, fmt.Errorf("remote: %d windows for %d instances", mw.Count(), c.SumN)
	}
	masks := memory.NewResizableBuffer(e.mem)
	masks.Resize(c.SumN * e.grid.Cells())
	defer masks.Release()
	if _, err := raster.ExpandWindows(masks.Bytes(), mw); err != nil {
		return nil, fmt.Errorf("remote: expand %w", err)
	}
	c.Masks = masks
	return e.builder.Build(&c)
}

// windowed returns rec checked as expand checks it — the batch contract
// and the windows against the grid and the data (raster.CheckWindows) —
// and rebuilt over rec's buffers (batch.Builder.BuildWindowed), still
// windowed, for a consumer that expands the masks itself (on a device).
// The caller owns one reference to the result and still owns rec.
func (e *expander) windowed(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	c, mw, wins, err := e.columns(rec)
	if err != nil {
		return nil, err
	}
	if err := raster.CheckWindows(e.grid.Rows, e.grid.Cols, wins, len(mw.Data)); err != nil {
		return nil, fmt.Errorf("remote: masks: %w", err)
	}
	// MaskWindowsOf checked the layout these buffers are taken from.
	fd := rec.Column(nDense).Data().Children()[0]
	vd := fd.Children()[0]
	if b := vd.Buffers()[1]; b != nil {
		off := 16*fd.Offset() + 4*vd.Offset()
		c.Windows = memory.SliceBuffer(b, off, b.Len()-off)
		defer c.Windows.Release()
	}
	dd := rec.Column(nDense + 1).Data()
	if b := dd.Buffers()[1]; b != nil {
		off := 4 * dd.Offset()
		c.WindowOffsets = memory.SliceBuffer(b, off, b.Len()-off)
		defer c.WindowOffsets.Release()
	}
	c.WindowData = dd.Buffers()[2]
	return e.builder.BuildWindowed(&c)
}
