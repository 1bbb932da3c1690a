package batch

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Column names of a training batch, in schema order.
const (
	ColImage         = "image"
	ColImageID       = "image_id"
	ColOrigHeight    = "orig_height"
	ColOrigWidth     = "orig_width"
	ColTransform     = "transform"
	ColBoxes         = "boxes"
	ColClasses       = "classes"
	ColIsCrowd       = "iscrowd"
	ColBoxesPerImage = "boxes_per_image"
	ColMasks         = "masks"
	// ColCanvas is the optional last column of a stream whose canvas
	// varies by batch (see [NewCanvasBuilder]).
	ColCanvas = "canvas"
)

// Schema metadata keys.
const (
	MetaVersion    = "segpipe.batch.version"
	MetaMaskStride = "segpipe.mask_stride"
)

// Version is the schema version written under [MetaVersion]. Version 2 added
// the iscrowd column.
const Version = "2"

// Builder makes batch records of one canvas and mask-grid size. It holds the
// schema so that every record of a run shares it. Safe for concurrent use.
type Builder struct {
	H, W, Hp, Wp int
	schema       *arrow.Schema
	imageType    *FixedShapeTensorType
	maskType     *FixedShapeTensorType
	boxType      *arrow.FixedSizeListType
	xfType       *arrow.FixedSizeListType
	boxesType    *arrow.ListType
	classesType  *arrow.ListType
	crowdType    *arrow.ListType
	masksType    *arrow.ListType
	windowed     *arrow.Schema
	canvas       bool // records carry ColCanvas
}

// canvasType is ColCanvas's type: a batch row's live (height, width).
var canvasType = arrow.FixedSizeListOfNonNullable(2, arrow.PrimitiveTypes.Int32)

// NewCanvasBuilder is NewBuilder for a stream whose batches use only part
// of the h×w canvas (rectangular or multi-scale batches): its records end
// with the ColCanvas column, fixed_size_list<int32>[2] per row, the live
// (height, width) of the row's canvas. A row's image lies in
// image[:, :height, :width] and its masks in masks[:, :height/stride,
// :width/stride]; the rest of the canvas is padding (the fill value) and
// zero mask cells. Both sides are multiples of the mask stride. The column
// is last in the dense and in the windowed schema, so that the columns
// before it are those of NewBuilder's schema, in the same places.
func NewCanvasBuilder(h, w, hp, wp int) (*Builder, error) {
	b, err := NewBuilder(h, w, hp, wp)
	if err != nil {
		return nil, err
	}
	b.canvas = true
	b.schema = withCanvas(b.schema)
	b.windowed = withCanvas(b.windowed)
	return b, nil
}

func withCanvas(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	return arrow.NewSchema(append(s.Fields(), arrow.Field{Name: ColCanvas, Type: canvasType}), &md)
}

// HasCanvas reports whether s is the schema of a NewCanvasBuilder stream.
func HasCanvas(s *arrow.Schema) bool { return s.HasField(ColCanvas) }

// NewBuilder returns a builder for canvases of h×w pixels and masks on an
// hp×wp grid (stride = h/hp, recorded in the schema metadata).
func NewBuilder(h, w, hp, wp int) (*Builder, error) {
	if h <= 0 || w <= 0 || hp <= 0 || wp <= 0 {
		return nil, fmt.Errorf("batch: sizes must be positive (canvas %dx%d, mask grid %dx%d)", h, w, hp, wp)
	}
	it, err := NewFixedShapeTensorType(arrow.PrimitiveTypes.Uint8, []int{3, h, w}, []string{"C", "H", "W"})
	if err != nil {
		return nil, err
	}
	mt, err := NewFixedShapeTensorType(arrow.PrimitiveTypes.Uint8, []int{hp, wp}, []string{"H", "W"})
	if err != nil {
		return nil, err
	}
	b := &Builder{H: h, W: w, Hp: hp, Wp: wp, imageType: it, maskType: mt}
	b.boxType = arrow.FixedSizeListOfNonNullable(4, arrow.PrimitiveTypes.Float32)
	b.xfType = arrow.FixedSizeListOfNonNullable(6, arrow.PrimitiveTypes.Float64)
	b.boxesType = arrow.ListOfNonNullable(b.boxType)
	b.classesType = arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)
	b.crowdType = arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)
	b.masksType = arrow.ListOfNonNullable(mt)
	md := arrow.NewMetadata([]string{MetaVersion, MetaMaskStride}, []string{Version, strconv.Itoa(h / hp)})
	b.schema = arrow.NewSchema([]arrow.Field{
		{Name: ColImage, Type: it},
		{Name: ColImageID, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColOrigHeight, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColOrigWidth, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColTransform, Type: b.xfType},
		{Name: ColBoxes, Type: b.boxesType},
		{Name: ColClasses, Type: b.classesType},
		{Name: ColIsCrowd, Type: b.crowdType},
		{Name: ColBoxesPerImage, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColMasks, Type: b.masksType},
	}, &md)
	b.windowed = WindowedSchema(b.schema, hp, wp)
	return b, nil
}

// Schema returns the batch schema.
func (b *Builder) Schema() *arrow.Schema { return b.schema }

// WindowedSchema returns the schema of the records BuildWindowed makes:
// [WindowedSchema] of the batch schema on the builder's grid.
func (b *Builder) WindowedSchema() *arrow.Schema { return b.windowed }

// Columns are the buffers of one batch of N images and SumN instances. The
// buffers are wrapped as Arrow buffers without copying; each must hold at
// least the bytes stated (little-endian, as Arrow requires).
type Columns struct {
	N, SumN int

	Images        *memory.Buffer // N·3·H·W uint8, CHW RGB per image
	ImageIDs      *memory.Buffer // N int64
	OrigHeight    *memory.Buffer // N int32
	OrigWidth     *memory.Buffer // N int32
	Transforms    *memory.Buffer // N·6 float64: [a b c d e f], canvas = (a·x+b·y+c, d·x+e·y+f)
	BoxesPerImage *memory.Buffer // N int32
	Offsets       *memory.Buffer // N+1 int32: 0 and the prefix sums of BoxesPerImage
	Boxes         *memory.Buffer // SumN·4 float32: x1 y1 x2 y2 on the canvas
	Classes       *memory.Buffer // SumN int32
	IsCrowd       *memory.Buffer // SumN uint8 in {0,1}; nil: no crowd instance
	Masks         *memory.Buffer // SumN·Hp·Wp uint8 in {0,1}

	// The windowed form's mask part, which BuildWindowed takes instead of
	// Masks (see WindowedSchema).
	Windows       *memory.Buffer // SumN·4 int32: x0 y0 w h on the grid per instance
	WindowOffsets *memory.Buffer // N+1 int32: image i's window bytes are WindowData[off[i]:off[i+1]]
	WindowData    *memory.Buffer // the windows' w·h bytes back to back

	// Canvas is N·2 int32, each row's live (height, width): required by a
	// NewCanvasBuilder builder, ignored by the others.
	Canvas *memory.Buffer
}

// Build wraps c into a record. The record takes its own reference on every
// buffer (through the array data), so the caller still owns — and must
// Release — the references it holds in c. The returned record starts with
// one reference that belongs to the caller; when the last holder releases
// it the buffers are released, which returns pooled memory to its
// allocator. Build checks sizes and offsets and never copies data.
func (b *Builder) Build(c *Columns) (arrow.RecordBatch, error) { return b.build(c, false) }

// BuildWindowed is Build for the windowed form: c.Windows, WindowOffsets
// and WindowData take the place of c.Masks (which is ignored). Besides
// Build's checks it checks that the data offsets start at or above 0,
// never decrease and stay inside WindowData; the windows against the grid
// and the data are an expansion's checks (pipeline/raster).
func (b *Builder) BuildWindowed(c *Columns) (arrow.RecordBatch, error) { return b.build(c, true) }

func (b *Builder) build(c *Columns, windowed bool) (arrow.RecordBatch, error) {
	n, sn := c.N, c.SumN
	if n < 0 || sn < 0 {
		return nil, fmt.Errorf("batch: negative count (N=%d, SumN=%d)", n, sn)
	}
	crowd := c.IsCrowd
	if crowd == nil && sn > 0 {
		// A producer without crowd instances need not keep a zero buffer.
		crowd = memory.NewBufferBytes(make([]byte, sn))
	}
	type sized struct {
		name string
		buf  *memory.Buffer
		size int
	}
	need := []sized{
		{ColImage, c.Images, n * 3 * b.H * b.W},
		{ColImageID, c.ImageIDs, n * 8},
		{ColOrigHeight, c.OrigHeight, n * 4},
		{ColOrigWidth, c.OrigWidth, n * 4},
		{ColTransform, c.Transforms, n * 6 * 8},
		{ColBoxesPerImage, c.BoxesPerImage, n * 4},
		{"offsets", c.Offsets, (n + 1) * 4},
		{ColBoxes, c.Boxes, sn * 4 * 4},
		{ColClasses, c.Classes, sn * 4},
		{ColIsCrowd, crowd, sn},
	}
	if windowed {
		need = append(need, sized{ColMaskWindows, c.Windows, sn * 16}, sized{ColMaskData + " offsets", c.WindowOffsets, (n + 1) * 4})
	} else {
		need = append(need, sized{ColMasks, c.Masks, sn * b.Hp * b.Wp})
	}
	if b.canvas {
		need = append(need, sized{ColCanvas, c.Canvas, n * 8})
	}
	for _, x := range need {
		if x.buf == nil {
			if x.size == 0 {
				continue
			}
			return nil, fmt.Errorf("batch: column %s: no buffer for %d bytes", x.name, x.size)
		}
		if x.buf.Len() < x.size {
			return nil, fmt.Errorf("batch: column %s: buffer of %d bytes, need %d", x.name, x.buf.Len(), x.size)
		}
	}
	offs := int32s(c.Offsets, n+1)
	bpi := int32s(c.BoxesPerImage, n)
	if offs[0] != 0 {
		return nil, fmt.Errorf("batch: offsets start at %d, want 0", offs[0])
	}
	for i := 0; i < n; i++ {
		if bpi[i] < 0 || offs[i+1] != offs[i]+bpi[i] {
			return nil, fmt.Errorf("batch: image %d: offsets %d..%d disagree with boxes_per_image %d", i, offs[i], offs[i+1], bpi[i])
		}
	}
	if int(offs[n]) != sn {
		return nil, fmt.Errorf("batch: boxes_per_image sums to %d, SumN is %d", offs[n], sn)
	}
	if sn > 0 {
		for k, v := range crowd.Bytes()[:sn] {
			if v > 1 {
				return nil, fmt.Errorf("batch: instance %d: iscrowd %d, want 0 or 1", k, v)
			}
		}
	}

	if b.canvas {
		if err := b.checkCanvas(int32s(c.Canvas, 2*n)); err != nil {
			return nil, err
		}
	}
	if windowed && n > 0 {
		do := int32s(c.WindowOffsets, n+1)
		data := 0
		if c.WindowData != nil {
			data = c.WindowData.Len()
		}
		if do[0] < 0 || int(do[n]) > data {
			return nil, fmt.Errorf("batch: column %s: offsets %d..%d outside %d bytes", ColMaskData, do[0], do[n], data)
		}
		for i := 0; i < n; i++ {
			if do[i+1] < do[i] {
				return nil, fmt.Errorf("batch: column %s: image %d: offsets %d..%d decrease", ColMaskData, i, do[i], do[i+1])
			}
		}
	}

	prim := func(t arrow.DataType, buf *memory.Buffer, length int) *array.Data {
		return array.NewData(t, length, []*memory.Buffer{nil, buf}, nil, 0, 0)
	}
	fsl := func(t arrow.DataType, child *array.Data, length int) *array.Data {
		d := array.NewData(t, length, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
		child.Release()
		return d
	}
	list := func(t arrow.DataType, child *array.Data) *array.Data {
		d := array.NewData(t, n, []*memory.Buffer{nil, c.Offsets}, []arrow.ArrayData{child}, 0, 0)
		child.Release()
		return d
	}
	u8, f32, f64, i32, i64 := arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64

	datas := []*array.Data{
		fsl(b.imageType, prim(u8, c.Images, n*3*b.H*b.W), n),
		prim(i64, c.ImageIDs, n),
		prim(i32, c.OrigHeight, n),
		prim(i32, c.OrigWidth, n),
		fsl(b.xfType, prim(f64, c.Transforms, n*6), n),
		list(b.boxesType, fsl(b.boxType, prim(f32, c.Boxes, sn*4), sn)),
		list(b.classesType, prim(i32, c.Classes, sn)),
		list(b.crowdType, prim(u8, crowd, sn)),
		prim(i32, c.BoxesPerImage, n),
	}
	schema := b.schema
	if !windowed {
		datas = append(datas, list(b.masksType, fsl(b.maskType, prim(u8, c.Masks, sn*b.Hp*b.Wp), sn)))
	}
	cols := make([]arrow.Array, len(datas), nDense+3)
	for i, d := range datas {
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	if windowed {
		wa, ba := windowColumns(n, sn, 0, c.Offsets, c.Windows, c.WindowOffsets, c.WindowData)
		cols, schema = append(cols, wa, ba), b.windowed
	}
	if b.canvas {
		d := fsl(canvasType, prim(i32, c.Canvas, 2*n), n)
		cols = append(cols, array.MakeFromData(d))
		d.Release()
	}
	rec := array.NewRecordBatch(schema, cols, int64(n))
	for _, a := range cols {
		a.Release()
	}
	return rec, nil
}

// checkCanvas refuses a live canvas that is empty, larger than the
// builder's or off the mask grid: a consumer slices by it.
func (b *Builder) checkCanvas(hw []int32) error {
	stride := b.H / b.Hp
	for i := 0; i+1 < len(hw); i += 2 {
		h, w := int(hw[i]), int(hw[i+1])
		if h < stride || w < stride || h > b.H || w > b.W || h%stride != 0 || w%stride != 0 {
			return fmt.Errorf("batch: image %d: live canvas %dx%d: want sides in [%d, %dx%d], multiples of the mask stride %d", i/2, h, w, stride, b.H, b.W, stride)
		}
	}
	return nil
}

func int32s(b *memory.Buffer, n int) []int32 {
	if n == 0 || b == nil {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b.Bytes()[0])), n)
}
