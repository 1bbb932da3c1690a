package batch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The windowed form of a batch (the "masks":"windowed" transport of
// `segpipe serve`): the batch schema with the masks column replaced by two
// columns that share the per-image split,
//
//	mask_windows  list<fixed_size_list<int32>[4]>  per instance (x0, y0, w, h) on the grid
//	mask_data     binary                           per image, its instances' w·h bytes back to back
//
// and the schema metadata MetaMaskTransport = MaskTransportWindowed and
// MetaMaskGrid = "Hp,Wp". An instance with no ON cell has the window
// (0,0,0,0) and no bytes. A window is the tight block of the instance's ON
// cells (pipeline/raster's Window, same field order); the dense stack is
// the windows' bytes placed on zero planes.
const (
	ColMaskWindows        = "mask_windows"
	ColMaskData           = "mask_data"
	MetaMaskTransport     = "segpipe.mask_transport"
	MetaMaskGrid          = "segpipe.mask_grid"
	MaskTransportWindowed = "windowed"
)

// nDense is the number of batch columns before masks, which both forms
// share.
const nDense = 9

var windowType = arrow.ListOfNonNullable(arrow.FixedSizeListOfNonNullable(4, arrow.PrimitiveTypes.Int32))

// WindowedSchema derives the windowed schema of a batch schema on an
// hp×wp grid: its first nine columns and metadata, then mask_windows and
// mask_data, then ColCanvas when dense has it.
func WindowedSchema(dense *arrow.Schema, hp, wp int) *arrow.Schema {
	fields := append([]arrow.Field(nil), dense.Fields()[:nDense]...)
	fields = append(fields,
		arrow.Field{Name: ColMaskWindows, Type: windowType},
		arrow.Field{Name: ColMaskData, Type: arrow.BinaryTypes.Binary})
	md := dense.Metadata()
	keys := append(md.Keys(), MetaMaskTransport, MetaMaskGrid)
	vals := append(md.Values(), MaskTransportWindowed, fmt.Sprintf("%d,%d", hp, wp))
	if HasCanvas(dense) {
		fields = append(fields, arrow.Field{Name: ColCanvas, Type: canvasType})
	}
	m := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &m)
}

// IsWindowed reports whether s is a windowed batch schema (it has the
// mask_windows column) rather than one with the dense masks column.
func IsWindowed(s *arrow.Schema) bool { return s.HasField(ColMaskWindows) }

// MaskGrid returns the grid a windowed schema's windows lie on, from
// MetaMaskGrid.
func MaskGrid(s *arrow.Schema) (rows, cols int, err error) {
	g, ok := s.Metadata().GetValue(MetaMaskGrid)
	if !ok {
		return 0, 0, fmt.Errorf("batch: windowed schema has no metadata %s", MetaMaskGrid)
	}
	a, b, ok := strings.Cut(g, ",")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || x <= 0 || y <= 0 {
		return 0, 0, fmt.Errorf("batch: windowed schema: metadata %s = %q: want \"Hp,Wp\", two positive integers", MetaMaskGrid, g)
	}
	return x, y, nil
}

// MaskWindows is a view of a windowed record's mask part. Windows and Data
// alias the record's memory and stay valid until it is released.
type MaskWindows struct {
	// Rows and Cols are the grid (Hp, Wp).
	Rows, Cols int
	// Offsets, N+1 of them, split the instances by image: instance k of
	// the record is window k-Offsets[0].
	Offsets []int32
	// Windows holds four int32 per instance, x0 y0 w h on the grid, in
	// instance order: Count() windows.
	Windows []int32
	// Data holds the windows' w·h bytes back to back, in instance order.
	Data []byte
}

// Count is the number of windows (instances).
func (m MaskWindows) Count() int { return len(m.Windows) / 4 }

// MaskWindowsOf views the mask part of a windowed record, checking its
// layout from the buffers themselves (a record off the wire is whatever a
// server sent): the grid, the windows' column type and offsets, and the
// per-image data offsets inside the data. It does not check the windows
// against the grid and the data's length against the windows' sizes: an
// expansion does that (pipeline/raster's Expand or CheckWindows). Errors
// say what is wrong; malformed input never panics.
func MaskWindowsOf(rec arrow.RecordBatch) (MaskWindows, error) {
	var m MaskWindows
	var err error
	if m.Rows, m.Cols, err = MaskGrid(rec.Schema()); err != nil {
		return m, err
	}
	img, err := ImageTensor(rec)
	if err != nil {
		return m, err
	}
	if len(img.Shape) != 3 || m.Rows > img.Shape[1] || m.Cols > img.Shape[2] {
		return m, fmt.Errorf("batch: mask grid %dx%d on images of shape %v", m.Rows, m.Cols, img.Shape)
	}
	n := int(rec.NumRows())
	wcol, err := column(rec, ColMaskWindows)
	if err != nil {
		return m, err
	}
	dcol, err := column(rec, ColMaskData)
	if err != nil {
		return m, err
	}
	wd := wcol.Data()
	if !arrow.TypeEqual(wd.DataType(), windowType) {
		return m, fmt.Errorf("batch: column %s is %s, want %s", ColMaskWindows, wd.DataType(), windowType)
	}
	if m.Offsets, err = offsetsOf(wd, n, ColMaskWindows); err != nil {
		return m, err
	}
	lo, hi := int(m.Offsets[0]), int(m.Offsets[n])
	if len(wd.Children()) != 1 || len(wd.Children()[0].Children()) != 1 {
		return m, fmt.Errorf("batch: column %s: nested column without its child", ColMaskWindows)
	}
	fd, vd := wd.Children()[0], wd.Children()[0].Children()[0]
	vals, err := bufferAt(vd, 1, ColMaskWindows)
	if err != nil {
		return m, err
	}
	base := fd.Offset()*4 + vd.Offset()
	wv := arrow.Int32Traits.CastFromBytes(vals)
	if fd.Offset() < 0 || vd.Offset() < 0 || fd.Len() < hi || base+4*hi > len(wv) {
		return m, fmt.Errorf("batch: column %s: %d window values for instances %d..%d", ColMaskWindows, len(wv)-base, lo, hi)
	}
	m.Windows = wv[base+4*lo : base+4*hi]
	dd := dcol.Data()
	if !arrow.TypeEqual(dd.DataType(), arrow.BinaryTypes.Binary) {
		return m, fmt.Errorf("batch: column %s is %s, want binary", ColMaskData, dd.DataType())
	}
	do, err := offsetsOf(dd, n, ColMaskData)
	if err != nil {
		return m, err
	}
	data, err := bufferAt(dd, 2, ColMaskData)
	if err != nil {
		return m, err
	}
	if int(do[n]) > len(data) {
		return m, fmt.Errorf("batch: column %s: offsets %d..%d outside %d bytes", ColMaskData, do[0], do[n], len(data))
	}
	m.Data = data[do[0]:do[n]]
	return m, nil
}

// offsetsOf returns the n+1 offsets of a list or binary array d of n rows,
// checked to start at or above 0 and never decrease.
func offsetsOf(d arrow.ArrayData, n int, what string) ([]int32, error) {
	if d.Len() != n || d.Offset() < 0 {
		return nil, fmt.Errorf("batch: column %s: %d rows at offset %d, record has %d", what, d.Len(), d.Offset(), n)
	}
	b, err := bufferAt(d, 1, what)
	if err != nil {
		return nil, err
	}
	v := arrow.Int32Traits.CastFromBytes(b)
	if n == 0 && len(v) == 0 {
		return []int32{0}, nil
	}
	if d.Offset()+n+1 > len(v) {
		return nil, fmt.Errorf("batch: column %s: %d offsets for %d rows", what, len(v)-d.Offset(), n)
	}
	v = v[d.Offset() : d.Offset()+n+1]
	if v[0] < 0 {
		return nil, fmt.Errorf("batch: column %s: offsets start at %d", what, v[0])
	}
	for i := 0; i < n; i++ {
		if v[i+1] < v[i] {
			return nil, fmt.Errorf("batch: column %s: row %d: offsets %d..%d decrease", what, i, v[i], v[i+1])
		}
	}
	return v, nil
}

// bufferAt returns the bytes of buffer i of d; an absent buffer is empty.
func bufferAt(d arrow.ArrayData, i int, what string) ([]byte, error) {
	if len(d.Buffers()) <= i {
		return nil, fmt.Errorf("batch: column %s: %d buffers, want %d", what, len(d.Buffers()), i+1)
	}
	if b := d.Buffers()[i]; b != nil {
		return b.Bytes(), nil
	}
	return nil, nil
}

// windowColumns makes the mask_windows and mask_data arrays of n images
// over buffers: the list offsets (shared with the other lists, from row
// listOffset), the
// windows (16 bytes an instance from instance 0), the data's n+1 offsets
// and the data.
func windowColumns(n, sumN, listOffset int, listOffs, wins, dataOffs, data *memory.Buffer) (arrow.Array, arrow.Array) {
	if data == nil {
		data = memory.NewBufferBytes(nil)
	}
	vals := array.NewData(arrow.PrimitiveTypes.Int32, 4*sumN, []*memory.Buffer{nil, wins}, nil, 0, 0)
	fsl := array.NewData(windowType.Elem(), sumN, []*memory.Buffer{nil}, []arrow.ArrayData{vals}, 0, 0)
	vals.Release()
	wd := array.NewData(windowType, n, []*memory.Buffer{nil, listOffs}, []arrow.ArrayData{fsl}, 0, listOffset)
	fsl.Release()
	bd := array.NewData(arrow.BinaryTypes.Binary, n, []*memory.Buffer{nil, dataOffs, data}, nil, 0, 0)
	wa, ba := array.MakeFromData(wd), array.MakeFromData(bd)
	wd.Release()
	bd.Release()
	return wa, ba
}

// windowedOf returns the windowed form of the dense batch record rec,
// whose masks are described by wins (four int32 per instance, in the
// record's instance order) and dataOffs/data (the N+1 per-image offsets
// into data of the windows' bytes): rec's first nine columns unchanged,
// then mask_windows and mask_data over the given buffers, without a copy.
// schema is WindowedSchema of rec's. The caller still owns rec and the
// buffers and owns one reference to the result.
func windowedOf(schema *arrow.Schema, rec arrow.RecordBatch, wins, dataOffs, data *memory.Buffer) (arrow.RecordBatch, error) {
	ms, err := MaskStack(rec)
	if err != nil {
		return nil, err
	}
	n := int(rec.NumRows())
	if wins.Len() < 16*ms.Count || dataOffs.Len() < 4*(n+1) {
		return nil, fmt.Errorf("batch: %d bytes of windows and %d of data offsets for %d instances of %d images", wins.Len(), dataOffs.Len(), ms.Count, n)
	}
	list := rec.Column(nDense).Data() // masks: its offsets are the split
	wa, ba := windowColumns(n, ms.Count, list.Offset(), list.Buffers()[1], wins, dataOffs, data)
	cols := make([]arrow.Array, 0, nDense+3)
	for i := 0; i < nDense; i++ {
		cols = append(cols, rec.Column(i))
	}
	cols = append(cols, wa, ba)
	if HasCanvas(rec.Schema()) {
		c, err := column(rec, ColCanvas)
		if err != nil {
			wa.Release()
			ba.Release()
			return nil, err
		}
		cols = append(cols, c)
	}
	out := array.NewRecordBatch(schema, cols, int64(n))
	wa.Release()
	ba.Release()
	return out, nil
}

// CheckCounts reports an error unless m splits like a batch's instances:
// bpi[i] windows for image i.
func (m MaskWindows) CheckCounts(bpi []int) error {
	if len(m.Offsets) != len(bpi)+1 {
		return fmt.Errorf("batch: mask windows for %d images, boxes for %d", len(m.Offsets)-1, len(bpi))
	}
	for i, n := range bpi {
		if got := int(m.Offsets[i+1] - m.Offsets[i]); got != n {
			return fmt.Errorf("batch: image %d: %d mask windows for %d instances", i, got, n)
		}
	}
	return nil
}
