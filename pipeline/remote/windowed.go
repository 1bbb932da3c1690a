package remote

import (
	"encoding/binary"
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
	MetaTransport  = batch.MetaMaskTransport
	MetaGrid       = batch.MetaMaskGrid
)

// nDense is the number of batch columns before masks: both transports send
// them unchanged.
const nDense = 9

// windowedSchema derives the windowed schema from a batch schema.
func windowedSchema(dense *arrow.Schema, hp, wp int) *arrow.Schema {
	return batch.WindowedSchema(dense, hp, wp)
}

// windower converts dense batch records into windowed ones. Not safe for
// concurrent use: one per stream.
type windower struct {
	mem    memory.Allocator
	schema *arrow.Schema
	hp, wp int
}

func newWindower(dense *arrow.Schema, hp, wp int, mem memory.Allocator) *windower {
	return &windower{mem: mem, schema: windowedSchema(dense, hp, wp), hp: hp, wp: wp}
}

// encode returns the windowed form of rec; the caller still owns rec and
// owns one reference to the result.
func (w *windower) encode(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	st, err := batch.MaskStack(rec)
	if err != nil {
		return nil, err
	}
	n, sumN, cells := int(rec.NumRows()), st.Count, w.hp*w.wp
	if len(st.Data) != sumN*cells || len(st.Offsets) != n+1 {
		return nil, fmt.Errorf("remote: mask stack of %d bytes for %d masks of %dx%d", len(st.Data), sumN, w.hp, w.wp)
	}
	wins := memory.NewResizableBuffer(w.mem)
	wins.Resize(16 * sumN)
	defer wins.Release()
	offs := memory.NewResizableBuffer(w.mem)
	offs.Resize(4 * (n + 1))
	defer offs.Release()
	wv := arrow.Int32Traits.CastFromBytes(wins.Bytes())
	ov := arrow.Int32Traits.CastFromBytes(offs.Bytes())
	var data []byte
	img := 0
	ov[0] = 0
	for k := 0; k < sumN; k++ {
		for img < n && int(st.Offsets[img+1]) <= k {
			img++
			ov[img] = int32(len(data))
		}
		x0, y0, ww, hh := tightWindow(st.Data[k*cells:(k+1)*cells], w.hp, w.wp)
		wv[4*k], wv[4*k+1], wv[4*k+2], wv[4*k+3] = int32(x0), int32(y0), int32(ww), int32(hh)
		for r := y0; r < y0+hh; r++ {
			o := k*cells + r*w.wp + x0
			data = append(data, st.Data[o:o+ww]...)
		}
	}
	for img < n {
		img++
		ov[img] = int32(len(data))
	}
	return batch.WindowedOf(w.schema, rec, wins, offs, memory.NewBufferBytes(data))
}

// tightWindow returns the smallest block holding every non-zero cell of a
// rows×cols plane; (0,0,0,0) when there is none.
func tightWindow(p []byte, rows, cols int) (x0, y0, w, h int) {
	y0 = -1
	for r := 0; r < rows; r++ {
		if anyNonZero(p[r*cols : (r+1)*cols]) {
			y0 = r
			break
		}
	}
	if y0 < 0 {
		return 0, 0, 0, 0
	}
	y1 := y0
	for r := rows - 1; r > y0; r-- {
		if anyNonZero(p[r*cols : (r+1)*cols]) {
			y1 = r
			break
		}
	}
	lo, hi := cols, -1
	for r := y0; r <= y1; r++ {
		row := p[r*cols : (r+1)*cols]
		for c := 0; c < lo; c++ {
			if row[c] != 0 {
				lo = c
				break
			}
		}
		for c := cols - 1; c > hi; c-- {
			if row[c] != 0 {
				hi = c
				break
			}
		}
	}
	return lo, y0, hi - lo + 1, y1 - y0 + 1
}

func anyNonZero(b []byte) bool {
	for len(b) >= 32 {
		if binary.LittleEndian.Uint64(b)|binary.LittleEndian.Uint64(b[8:])|
			binary.LittleEndian.Uint64(b[16:])|binary.LittleEndian.Uint64(b[24:]) != 0 {
			return true
		}
		b = b[32:]
	}
	for _, v := range b {
		if v != 0 {
			return true
		}
	}
	return false
}

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
	if s.NumFields() != nDense+2 || s.Field(nDense).Name != ColMaskWindows || s.Field(nDense+1).Name != ColMaskData {
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
	b, err := batch.NewBuilder(sh[1], sh[2], hp, wp)
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

// values returns buffer 1 (values) of d, checking that d is not sliced:
// the records come from our own IPC stream, whose arrays never are.
func values(d arrow.ArrayData, what string) (*memory.Buffer, error) {
	if d.Offset() != 0 || len(d.Buffers()) < 2 {
		return nil, fmt.Errorf("remote: column %s: unexpected layout (offset %d)", what, d.Offset())
	}
	b := d.Buffers()[1]
	if b == nil {
		b = memory.NewBufferBytes(nil)
	}
	return b, nil
}

// columns reads a windowed record: the nine shared columns' buffers into
// c, the mask part through batch.MaskWindowsOf, its windows as
// raster.Windows, checked to be one per instance with the boxes' split.
func (e *expander) columns(rec arrow.RecordBatch) (c batch.Columns, mw batch.MaskWindows, wins []raster.Window, err error) {
	n := int(rec.NumRows())
	c.N = n
	get := func(dst **memory.Buffer, d arrow.ArrayData, what string) {
		if err == nil {
			*dst, err = values(d, what)
		}
	}
	child := func(d arrow.ArrayData) arrow.ArrayData {
		if len(d.Children()) != 1 {
			err = fmt.Errorf("remote: nested column without its child")
			return d
		}
		return d.Children()[0]
	}
	get(&c.Images, child(rec.Column(0).Data()), batch.ColImage)
	get(&c.ImageIDs, rec.Column(1).Data(), batch.ColImageID)
	get(&c.OrigHeight, rec.Column(2).Data(), batch.ColOrigHeight)
	get(&c.OrigWidth, rec.Column(3).Data(), batch.ColOrigWidth)
	get(&c.Transforms, child(rec.Column(4).Data()), batch.ColTransform)
	get(&c.Offsets, rec.Column(5).Data(), batch.ColBoxes)
	get(&c.Boxes, child(child(rec.Column(5).Data())), batch.ColBoxes)
	get(&c.Classes, child(rec.Column(6).Data()), batch.ColClasses)
	get(&c.IsCrowd, child(rec.Column(7).Data()), batch.ColIsCrowd)
	get(&c.BoxesPerImage, rec.Column(8).Data(), batch.ColBoxesPerImage)
	if err != nil {
		return c, mw, nil, err
	}
	if mw, err = batch.MaskWindowsOf(rec); err != nil {
		return c, mw, nil, fmt.Errorf("remote: %w", err)
	}
	offs := arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())
	if len(offs) < n+1 {
		return c, mw, nil, fmt.Errorf("remote: %d offsets for %d images", len(offs), n)
	}
	c.SumN = int(offs[n])
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
	c, mw, wins, err := e.columns(rec)
	if err != nil {
		return nil, err
	}
	masks := memory.NewResizableBuffer(e.mem)
	masks.Resize(c.SumN * e.grid.Cells())
	defer masks.Release()
	if err := raster.Expand(masks.Bytes(), e.grid, wins, mw.Data); err != nil {
		return nil, fmt.Errorf("remote: expand masks: %w", err)
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
