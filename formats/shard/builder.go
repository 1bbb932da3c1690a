package shard

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// rowBuilder appends Images to Arrow builders that are reused for every
// row group, so the steady state allocates only what the data grows into.
type rowBuilder struct {
	rb *array.RecordBuilder

	imageID  *array.Int64Builder
	fileName *array.StringBuilder
	width    *array.Int32Builder
	height   *array.Int32Builder
	format   *array.StringBuilder
	image    *array.BinaryBuilder
	imageCRC *array.Uint32Builder
	srcW     *array.Int32Builder // nil below format version 3
	srcH     *array.Int32Builder

	instances *array.ListBuilder
	inst      *array.StructBuilder
	annID     *array.Int64Builder
	catID     *array.Int32Builder
	class     *array.Int32Builder
	bbox      *array.ListBuilder
	bboxVals  *array.Float32Builder
	area      *array.Float32Builder
	isCrowd   *array.BooleanBuilder
	polys     *array.ListBuilder
	ring      *array.ListBuilder
	ringVals  *array.Float32Builder
	rle       *array.StructBuilder
	rleSize   *array.ListBuilder
	rleSizeV  *array.Int32Builder
	rleCounts *array.ListBuilder
	rleCntV   *array.Uint32Builder

	rows int
	// reserve is the image bytes a row group is expected to hold: claiming
	// them up front spares the builder its grow-and-copy steps.
	reserve int
}

// newRowBuilder builds rows of sc, the schema of the version being
// written (schemaV2 or schema).
func newRowBuilder(mem memory.Allocator, reserve int, sc *arrow.Schema) *rowBuilder {
	rb := array.NewRecordBuilder(mem, sc)
	b := &rowBuilder{rb: rb, reserve: reserve}
	b.imageID = rb.Field(colImageID).(*array.Int64Builder)
	b.fileName = rb.Field(colFileName).(*array.StringBuilder)
	b.width = rb.Field(colWidth).(*array.Int32Builder)
	b.height = rb.Field(colHeight).(*array.Int32Builder)
	b.format = rb.Field(colImageFormat).(*array.StringBuilder)
	b.image = rb.Field(colImage).(*array.BinaryBuilder)
	b.imageCRC = rb.Field(colImageCRC).(*array.Uint32Builder)
	if sc.NumFields() > colSourceWidth {
		b.srcW = rb.Field(colSourceWidth).(*array.Int32Builder)
		b.srcH = rb.Field(colSourceHeight).(*array.Int32Builder)
	}
	b.instances = rb.Field(colInstances).(*array.ListBuilder)
	b.inst = b.instances.ValueBuilder().(*array.StructBuilder)
	b.annID = b.inst.FieldBuilder(instAnnID).(*array.Int64Builder)
	b.catID = b.inst.FieldBuilder(instCategoryID).(*array.Int32Builder)
	b.class = b.inst.FieldBuilder(instClass).(*array.Int32Builder)
	b.bbox = b.inst.FieldBuilder(instBBox).(*array.ListBuilder)
	b.bboxVals = b.bbox.ValueBuilder().(*array.Float32Builder)
	b.area = b.inst.FieldBuilder(instArea).(*array.Float32Builder)
	b.isCrowd = b.inst.FieldBuilder(instIsCrowd).(*array.BooleanBuilder)
	b.polys = b.inst.FieldBuilder(instPolygons).(*array.ListBuilder)
	b.ring = b.polys.ValueBuilder().(*array.ListBuilder)
	b.ringVals = b.ring.ValueBuilder().(*array.Float32Builder)
	b.rle = b.inst.FieldBuilder(instRLE).(*array.StructBuilder)
	b.rleSize = b.rle.FieldBuilder(0).(*array.ListBuilder)
	b.rleSizeV = b.rleSize.ValueBuilder().(*array.Int32Builder)
	b.rleCounts = b.rle.FieldBuilder(1).(*array.ListBuilder)
	b.rleCntV = b.rleCounts.ValueBuilder().(*array.Uint32Builder)
	return b
}

func (b *rowBuilder) append(img *Image) {
	if b.rows == 0 {
		b.image.ReserveData(b.reserve)
	}
	b.rows++
	b.imageID.Append(img.ImageID)
	b.fileName.Append(img.FileName)
	b.width.Append(img.Width)
	b.height.Append(img.Height)
	b.format.Append(img.Format)
	b.image.Append(img.Bytes)
	b.imageCRC.Append(ImageCRC(img.Bytes))
	if b.srcW != nil {
		sw, sh := img.SourceSize()
		b.srcW.Append(sw)
		b.srcH.Append(sh)
	}
	b.instances.Append(true)
	for i := range img.Instances {
		in := &img.Instances[i]
		b.inst.Append(true)
		b.annID.Append(in.AnnID)
		b.catID.Append(in.CategoryID)
		b.class.Append(in.Class)
		b.bbox.Append(true)
		b.bboxVals.AppendValues(in.BBox[:], nil)
		b.area.Append(in.Area)
		b.isCrowd.Append(in.IsCrowd)
		b.polys.Append(true)
		for _, r := range in.Polygons {
			b.ring.Append(true)
			b.ringVals.AppendValues(r, nil)
		}
		if in.RLE == nil {
			// A null struct still needs a slot in each child.
			b.rle.AppendNull()
		} else {
			b.rle.Append(true)
			b.rleSize.Append(true)
			b.rleSizeV.Append(in.RLE.Height)
			b.rleSizeV.Append(in.RLE.Width)
			b.rleCounts.Append(true)
			b.rleCntV.AppendValues(in.RLE.Counts, nil)
		}
	}
}

// flush returns the rows appended since the last flush as one record batch
// (owned by the caller) and resets the builders for the next row group.
func (b *rowBuilder) flush() arrow.RecordBatch {
	b.rows = 0
	return b.rb.NewRecordBatch()
}

func (b *rowBuilder) release() { b.rb.Release() }

// rowSize is the writer's deterministic estimate of the bytes a row adds to
// a shard. Shard and row-group boundaries are decided from it, never from
// compressed output sizes, so they depend on the input rows alone.
//
// A pre-decoded row counts its raw pixels (3·width·height) whatever its
// encoding: a zstd row's compressed size is only known after decoding and
// compressing the image, which a distributed conversion's plan cannot
// afford, so zstd shards come out smaller than the target by the
// compression ratio.
func rowSize(img *Image) int64 {
	pix := int64(len(img.Bytes))
	if Predecoded(img.Format) {
		pix = PixelBytes(img.Width, img.Height)
	}
	n := pix + int64(len(img.FileName)+len(img.Format)) + 28
	for i := range img.Instances {
		in := &img.Instances[i]
		n += 48
		for _, r := range in.Polygons {
			n += 4 + 4*int64(len(r))
		}
		if in.RLE != nil {
			n += 12 + 4*int64(len(in.RLE.Counts))
		}
	}
	return n
}
