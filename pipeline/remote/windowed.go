package remote

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/pipeline/raster"
)

// Windowed transport: the batch schema with the masks column replaced by
// two columns that share the per-image split:
//
//	mask_windows  list<fixed_size_list<int32>[4]>  per instance (x0, y0, w, h) on the grid
//	mask_data     binary                           per image, its instances' w·h bytes back to back
//
// and schema metadata MetaTransport = "windowed", MetaGrid = "Hp,Wp". An
// instance with no ON cell has the window (0,0,0,0) and no bytes.
const (
	ColMaskWindows = "mask_windows"
	ColMaskData    = "mask_data"
	MetaTransport  = "segpipe.mask_transport"
	MetaGrid       = "segpipe.mask_grid"
)

// nDense is the number of batch columns before masks: both transports send
// them unchanged.
const nDense = 9

var windowType = arrow.ListOfNonNullable(arrow.FixedSizeListOfNonNullable(4, arrow.PrimitiveTypes.Int32))

// windowedSchema derives the windowed schema from a batch schema.
func windowedSchema(dense *arrow.Schema, hp, wp int) *arrow.Schema {
	fields := append([]arrow.Field(nil), dense.Fields()[:nDense]...)
	fields = append(fields,
		arrow.Field{Name: ColMaskWindows, Type: windowType},
		arrow.Field{Name: ColMaskData, Type: arrow.BinaryTypes.Binary})
	md := dense.Metadata()
	keys := append(md.Keys(), MetaTransport, MetaGrid)
	vals := append(md.Values(), MasksWindowed, fmt.Sprintf("%d,%d", hp, wp))
	m := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &m)
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
	list := rec.Column(nDense).Data() // masks: its offsets are the split
	lofs := list.Buffers()[1]
	child := array.NewData(windowType.Elem(), sumN, []*memory.Buffer{nil},
		[]arrow.ArrayData{array.NewData(arrow.PrimitiveTypes.Int32, 4*sumN, []*memory.Buffer{nil, wins}, nil, 0, 0)}, 0, 0)
	child.Children()[0].Release()
	wd := array.NewData(windowType, n, []*memory.Buffer{nil, lofs}, []arrow.ArrayData{child}, 0, list.Offset())
	child.Release()
	bd := array.NewData(arrow.BinaryTypes.Binary, n, []*memory.Buffer{nil, offs, memory.NewBufferBytes(data)}, nil, 0, 0)
	cols := make([]arrow.Array, 0, nDense+2)
	for i := 0; i < nDense; i++ {
		cols = append(cols, rec.Column(i))
	}
	wa, ba := array.MakeFromData(wd), array.MakeFromData(bd)
	wd.Release()
	bd.Release()
	cols = append(cols, wa, ba)
	out := array.NewRecordBatch(w.schema, cols, int64(n))
	wa.Release()
	ba.Release()
	return out, nil
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

// expander turns windowed records back into batch records. Not safe for
// concurrent use: one per stream.
type expander struct {
	mem     memory.Allocator
	builder *batch.Builder
	grid    raster.Grid
	wins    []raster.Window
}

// newExpander reads the grid and canvas sizes from a windowed schema.
func newExpander(s *arrow.Schema, mem memory.Allocator) (*expander, error) {
	if s.NumFields() != nDense+2 || s.Field(nDense).Name != ColMaskWindows || s.Field(nDense+1).Name != ColMaskData {
		return nil, fmt.Errorf("remote: windowed schema has columns %v", fieldNames(s))
	}
	g, ok := s.Metadata().GetValue(MetaGrid)
	hp, wp, err := parsePair(g)
	if !ok || err != nil {
		return nil, fmt.Errorf("remote: windowed schema: metadata %s = %q: %v", MetaGrid, g, err)
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
	return &expander{mem: mem, builder: b, grid: raster.Grid{Rows: hp, Cols: wp, Stride: sh[1] / hp}}, nil
}

func parsePair(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, fmt.Errorf("want \"Hp,Wp\"")
	}
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || x <= 0 || y <= 0 {
		return 0, 0, fmt.Errorf("want two positive integers")
	}
	return x, y, nil
}

func fieldNames(s *arrow.Schema) []string {
	var out []string
	for _, f := range s.Fields() {
		out = append(out, f.Name)
	}
	return out
}

// buf returns buffer 1 (values) of d, checking that d is not sliced: the
// records come from our own IPC stream, whose arrays never are.
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

// expand returns the dense batch record of a windowed one. The result
// shares every column buffer but the masks with rec; the caller owns one
// reference to it and still owns rec.
func (e *expander) expand(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	var c batch.Columns
	c.N = n
	var err error
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
	var winBuf *memory.Buffer
	get(&winBuf, child(child(rec.Column(9).Data())), ColMaskWindows)
	if err != nil {
		return nil, err
	}
	bd := rec.Column(10).Data()
	if bd.Offset() != 0 || len(bd.Buffers()) < 3 {
		return nil, fmt.Errorf("remote: column %s: unexpected layout", ColMaskData)
	}
	offs := arrow.Int32Traits.CastFromBytes(c.Offsets.Bytes())
	if len(offs) < n+1 {
		return nil, fmt.Errorf("remote: %d offsets for %d images", len(offs), n)
	}
	c.SumN = int(offs[n])
	wv := arrow.Int32Traits.CastFromBytes(winBuf.Bytes())
	if c.SumN < 0 || len(wv) < 4*c.SumN {
		return nil, fmt.Errorf("remote: %d windows for %d instances", len(wv)/4, c.SumN)
	}
	e.wins = e.wins[:0]
	for k := 0; k < c.SumN; k++ {
		e.wins = append(e.wins, raster.Window{X0: wv[4*k], Y0: wv[4*k+1], W: wv[4*k+2], H: wv[4*k+3]})
	}
	var data []byte
	if b := bd.Buffers()[2]; b != nil {
		data = b.Bytes()
	}
	if bo := bd.Buffers()[1]; bo != nil && bo.Len() >= 4*(n+1) {
		do := arrow.Int32Traits.CastFromBytes(bo.Bytes())
		if do[0] < 0 || do[n] < do[0] || int(do[n]) > len(data) {
			return nil, fmt.Errorf("remote: column %s: offsets %d..%d outside %d bytes", ColMaskData, do[0], do[n], len(data))
		}
		data = data[do[0]:do[n]]
	} else if n > 0 {
		return nil, fmt.Errorf("remote: column %s has no offsets", ColMaskData)
	}
	masks := memory.NewResizableBuffer(e.mem)
	masks.Resize(c.SumN * e.grid.Cells())
	defer masks.Release()
	if err := raster.Expand(masks.Bytes(), e.grid, e.wins, data); err != nil {
		return nil, fmt.Errorf("remote: expand masks: %w", err)
	}
	c.Masks = masks
	return e.builder.Build(&c)
}
