package shard

import (
	"hash/crc32"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// FormatVersion is the version of the shard layout described in README.md.
// It is stored in manifest.json and in every shard's Parquet key-value
// metadata under MetadataKeyFormatVersion. Readers refuse versions they do
// not know, so any change to column names, types or meaning must bump it.
//
// Version 2 added the image_crc32c column; version 3 the source_width and
// source_height columns of pre-decoded shards. Readers accept
// MinFormatVersion through FormatVersion. The writer writes the oldest
// version that holds its rows: 2 for original encodings (so those shards
// are byte-identical to what earlier releases wrote and stay readable by
// them), 3 when pixels are pre-decoded (see Pixels).
const FormatVersion = 3

// versionEncoded is the version the writer writes for shards of original
// encodings.
const versionEncoded = 2

// MinFormatVersion is the oldest version readers accept: version 1 shards
// lack image_crc32c, so their image bytes go unchecked.
const MinFormatVersion = 1

// MetadataKeyFormatVersion is the Parquet key-value metadata key holding
// FormatVersion as a decimal string.
const MetadataKeyFormatVersion = "segpipe.format_version"

// ManifestName is the file name of the manifest inside a shard directory.
const ManifestName = "manifest.json"

// Top-level column names. They are part of the format: DuckDB and pyarrow
// users query them by name.
const (
	ColImageID     = "image_id"
	ColFileName    = "file_name"
	ColWidth       = "width"
	ColHeight      = "height"
	ColImageFormat = "image_format"
	ColImage       = "image"
	ColInstances   = "instances"
	// ColImageCRC is the CRC-32C (Castagnoli) of the image column's bytes,
	// checked before an image is decoded: Parquet page checksums are not
	// written by arrow-go, and the image column is stored uncompressed,
	// so without it nothing notices a flipped byte there. Format ≥ 2.
	ColImageCRC = "image_crc32c"
	// ColSourceWidth and ColSourceHeight are the size of the source image
	// a pre-decoded row was resized from; width and height are the stored
	// pixels' size, which the annotations are in. Format ≥ 3.
	ColSourceWidth  = "source_width"
	ColSourceHeight = "source_height"
)

// Element name of every list. "element" is the name the Parquet spec's
// three-level list layout uses, so DuckDB, pyarrow and Spark all read the
// lists without a compatibility flag.
const listElem = "element"

func listOf(t arrow.DataType) *arrow.ListType {
	return arrow.ListOfField(arrow.Field{Name: listElem, Type: t, Nullable: false})
}

// rleType is the crowd mask: COCO's size [h, w] and canonical uncompressed
// counts (column-major, alternating runs starting with zeros).
// The children are nullable only because a null rle struct has null
// children in Arrow; they are never null under a valid rle.
var rleType = arrow.StructOf(
	arrow.Field{Name: "size", Type: listOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	arrow.Field{Name: "counts", Type: listOf(arrow.PrimitiveTypes.Uint32), Nullable: true},
)

// instanceType is one annotated object. The contiguous class is
// "class_index", not "class", which is a keyword in SQL and Python. bbox is a 4-element list rather
// than a fixed_size_list because Parquet has no fixed-size list: every
// reader sees a plain list either way, and a plain list round-trips to the
// same Arrow type in every Arrow implementation.
var instanceType = arrow.StructOf(
	arrow.Field{Name: "ann_id", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "category_id", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "class_index", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "bbox", Type: listOf(arrow.PrimitiveTypes.Float32)},
	arrow.Field{Name: "area", Type: arrow.PrimitiveTypes.Float32},
	arrow.Field{Name: "iscrowd", Type: arrow.FixedWidthTypes.Boolean},
	arrow.Field{Name: "polygons", Type: listOf(listOf(arrow.PrimitiveTypes.Float32))},
	arrow.Field{Name: "rle", Type: rleType, Nullable: true},
)

// Indices of instanceType's fields, used by the builder and the decoder.
const (
	instAnnID = iota
	instCategoryID
	instClass
	instBBox
	instArea
	instIsCrowd
	instPolygons
	instRLE
)

// Indices of the top-level columns in Schema.
const (
	colImageID = iota
	colFileName
	colWidth
	colHeight
	colImageFormat
	colImage
	colInstances
	colImageCRC
	colSourceWidth
	colSourceHeight
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: ColImageID, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColFileName, Type: arrow.BinaryTypes.String},
	{Name: ColWidth, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColHeight, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColImageFormat, Type: arrow.BinaryTypes.String},
	{Name: ColImage, Type: arrow.BinaryTypes.Binary},
	{Name: ColInstances, Type: listOf(instanceType)},
	{Name: ColImageCRC, Type: arrow.PrimitiveTypes.Uint32},
	{Name: ColSourceWidth, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColSourceHeight, Type: arrow.PrimitiveTypes.Int32},
}, nil)

// schemaV1 and schemaV2 are the schemas of format versions 1 and 2:
// prefixes of the current one.
var (
	schemaV1 = arrow.NewSchema(schema.Fields()[:colImageCRC], nil)
	schemaV2 = arrow.NewSchema(schema.Fields()[:colSourceWidth], nil)
)

// crcTable is CRC-32C's, which CPUs compute in hardware (SSE 4.2, ARMv8).
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ImageCRC returns the CRC-32C of encoded image bytes, as image_crc32c
// stores it.
func ImageCRC(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// Schema returns the Arrow schema of a shard's rows. Record batches
// returned by this package have exactly this schema (or a projection of
// it). The returned value is shared and must not be modified.
func Schema() *arrow.Schema { return schema }

// writerProps are the Parquet settings of every shard. Everything that
// could vary between runs is pinned so that the same rows give the same
// bytes.
func writerProps() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	props := parquet.NewWriterProperties(
		parquet.WithVersion(parquet.V2_6),
		// V1 data pages: the page layout every Parquet reader supports.
		parquet.WithDataPageVersion(parquet.DataPageV1),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(3),
		// The encoded image is already compressed (JPEG/PNG, or a zstd
		// frame of pixels): a second codec would cost CPU on every read and
		// save nothing. Raw pixels are left uncompressed on purpose.
		parquet.WithCompressionFor(ColImage, compress.Codecs.Uncompressed),
		// Dictionaries and min/max statistics over megabytes of unique
		// image bytes are pure overhead.
		parquet.WithDictionaryFor(ColImage, false),
		parquet.WithStatsFor(ColImage, false),
		// Polygon coordinates hardly repeat, so a dictionary only costs
		// (it made the column larger than plain floats on coco-tiny).
		// Byte-stream-split puts the four bytes of every float in four
		// streams, which zstd then compresses far better than plain.
		parquet.WithDictionaryFor(colPolygonValues, false),
		parquet.WithEncodingFor(colPolygonValues, parquet.Encodings.ByteStreamSplit),
		parquet.WithDictionaryFor(colRLECounts, false),
		// A row group is closed by the writer by byte size, never by
		// this row cap (see rowGroupBytes).
		parquet.WithMaxRowGroupLength(1<<30),
		parquet.WithCreatedBy(createdBy),
	)
	return props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
}

// Parquet leaf paths of the large annotation columns.
const (
	colPolygonValues = "instances.list.element.polygons.list.element.list.element"
	colRLECounts     = "instances.list.element.rle.counts.list.element"
)

// createdBy is fixed so that shard bytes do not depend on the build: the
// layout is identified by MetadataKeyFormatVersion, the Parquet writer by
// the go.mod pin of arrow-go.
const createdBy = "segpipe shard writer (arrow-go parquet v18)"
