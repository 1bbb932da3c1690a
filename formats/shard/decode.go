package shard

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Decoder turns rows of a shard record batch (full schema or any
// projection of it) into Images. The zero value is ready for Reset.
//
// Decoded slices alias the batch's buffers (image bytes, polygon rings,
// RLE counts): they are valid while the batch is, and must not be
// modified. Decoding into the same Image reuses its slices, so a steady
// stream of rows allocates only when an image has more instances or rings
// than any before it.
type Decoder struct {
	rec arrow.RecordBatch

	imageID          *array.Int64
	fileName, format *array.String
	width, height    *array.Int32
	image            *array.Binary
	imageCRC         *array.Uint32
	srcW, srcH       *array.Int32

	instances *array.List
	annID     *array.Int64
	catID     *array.Int32
	class     *array.Int32
	bbox      *array.List
	bboxVals  []float32
	area      *array.Float32
	isCrowd   *array.Boolean
	polys     *array.List
	ring      *array.List
	ringVals  []float32
	rle       *array.Struct
	rleSize   *array.List
	rleSizeV  []int32
	rleCounts *array.List
	rleCntV   []uint32
}

// ErrImageChecksum is wrapped by a *ChecksumError.
var ErrImageChecksum = errors.New("image bytes fail their checksum")

// ChecksumError is a row whose image bytes do not match image_crc32c: the
// shard was damaged after it was written. Decode leaves the row's Bytes
// nil so that damaged bytes are never decoded.
type ChecksumError struct {
	Row       int // row within the batch
	ImageID   int64
	Want, Got uint32
}

// Error says where, then what.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("row %d image %d: %v (crc32c %08x, stored %08x)", e.Row, e.ImageID, ErrImageChecksum, e.Got, e.Want)
}

// Unwrap returns ErrImageChecksum.
func (e *ChecksumError) Unwrap() error { return ErrImageChecksum }

// Reset points the decoder at rec. It does not retain rec.
func (d *Decoder) Reset(rec arrow.RecordBatch) error {
	*d = Decoder{rec: rec}
	sc := rec.Schema()
	for i, f := range sc.Fields() {
		want := schema.FieldIndices(f.Name)
		if want == nil || !arrow.TypeEqual(schema.Field(want[0]).Type, f.Type) {
			return fmt.Errorf("column %q of type %s is not part of the shard schema", f.Name, f.Type)
		}
		col := rec.Column(i)
		switch f.Name {
		case ColImageID:
			d.imageID = col.(*array.Int64)
		case ColFileName:
			d.fileName = col.(*array.String)
		case ColWidth:
			d.width = col.(*array.Int32)
		case ColHeight:
			d.height = col.(*array.Int32)
		case ColImageFormat:
			d.format = col.(*array.String)
		case ColImage:
			d.image = col.(*array.Binary)
		case ColImageCRC:
			d.imageCRC = col.(*array.Uint32)
		case ColSourceWidth:
			d.srcW = col.(*array.Int32)
		case ColSourceHeight:
			d.srcH = col.(*array.Int32)
		case ColInstances:
			d.instances = col.(*array.List)
			st := d.instances.ListValues().(*array.Struct)
			d.annID = st.Field(instAnnID).(*array.Int64)
			d.catID = st.Field(instCategoryID).(*array.Int32)
			d.class = st.Field(instClass).(*array.Int32)
			d.bbox = st.Field(instBBox).(*array.List)
			d.bboxVals = d.bbox.ListValues().(*array.Float32).Float32Values()
			d.area = st.Field(instArea).(*array.Float32)
			d.isCrowd = st.Field(instIsCrowd).(*array.Boolean)
			d.polys = st.Field(instPolygons).(*array.List)
			d.ring = d.polys.ListValues().(*array.List)
			d.ringVals = d.ring.ListValues().(*array.Float32).Float32Values()
			d.rle = st.Field(instRLE).(*array.Struct)
			d.rleSize = d.rle.Field(0).(*array.List)
			d.rleSizeV = d.rleSize.ListValues().(*array.Int32).Int32Values()
			d.rleCounts = d.rle.Field(1).(*array.List)
			d.rleCntV = d.rleCounts.ListValues().(*array.Uint32).Uint32Values()
		}
	}
	return nil
}

// Len is the number of rows of the current batch.
func (d *Decoder) Len() int {
	if d.rec == nil {
		return 0
	}
	return int(d.rec.NumRows())
}

// Decode fills dst with row i of the current batch. Columns missing from a
// projected batch leave their fields zero.
func (d *Decoder) Decode(i int, dst *Image) (err error) {
	// Arrays decoded from a damaged file can be inconsistent in ways the
	// Parquet reader does not catch.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("row %d: inconsistent arrays (damaged shard?): %v", i, p)
		}
	}()
	if i < 0 || i >= d.Len() {
		return fmt.Errorf("row %d out of range [0,%d)", i, d.Len())
	}
	*dst = Image{Instances: dst.Instances[:0]}
	if d.imageID != nil {
		dst.ImageID = d.imageID.Value(i)
	}
	if d.fileName != nil {
		dst.FileName = d.fileName.Value(i)
	}
	if d.width != nil {
		dst.Width = d.width.Value(i)
	}
	if d.height != nil {
		dst.Height = d.height.Value(i)
	}
	if d.format != nil {
		dst.Format = d.format.Value(i)
	}
	// Rows of versions before 3 were never resized.
	dst.SourceWidth, dst.SourceHeight = dst.Width, dst.Height
	if d.srcW != nil && d.srcH != nil {
		dst.SourceWidth, dst.SourceHeight = d.srcW.Value(i), d.srcH.Value(i)
	}
	if d.image != nil {
		dst.Bytes = d.image.Value(i)
		if d.imageCRC != nil {
			if want, got := d.imageCRC.Value(i), ImageCRC(dst.Bytes); got != want {
				dst.Bytes = nil
				return &ChecksumError{Row: i, ImageID: dst.ImageID, Want: want, Got: got}
			}
		}
	}
	if d.instances == nil {
		return nil
	}
	start, end := d.instances.ValueOffsets(i)
	for j := int(start); j < int(end); j++ {
		n := len(dst.Instances)
		if n < cap(dst.Instances) {
			dst.Instances = dst.Instances[:n+1]
		} else {
			dst.Instances = append(dst.Instances, Instance{})
		}
		if err := d.decodeInstance(j, &dst.Instances[n]); err != nil {
			return fmt.Errorf("image %d instance %d: %w", dst.ImageID, n, err)
		}
	}
	return nil
}

func (d *Decoder) decodeInstance(j int, in *Instance) error {
	polys, rle := in.Polygons[:0], in.RLE
	*in = Instance{
		AnnID:      d.annID.Value(j),
		CategoryID: d.catID.Value(j),
		Class:      d.class.Value(j),
		Area:       d.area.Value(j),
		IsCrowd:    d.isCrowd.Value(j),
	}
	bs, be := d.bbox.ValueOffsets(j)
	if be-bs != 4 {
		return fmt.Errorf("ann %d: bbox has %d values, want 4", in.AnnID, be-bs)
	}
	copy(in.BBox[:], d.bboxVals[bs:be])
	ps, pe := d.polys.ValueOffsets(j)
	for k := ps; k < pe; k++ {
		rs, re := d.ring.ValueOffsets(int(k))
		polys = append(polys, d.ringVals[rs:re:re])
	}
	in.Polygons = polys
	if d.rle.IsValid(j) {
		ss, se := d.rleSize.ValueOffsets(j)
		if se-ss != 2 {
			return fmt.Errorf("ann %d: rle size has %d values, want 2", in.AnnID, se-ss)
		}
		if rle == nil {
			rle = new(RLE)
		}
		cs, ce := d.rleCounts.ValueOffsets(j)
		*rle = RLE{Height: d.rleSizeV[ss], Width: d.rleSizeV[ss+1], Counts: d.rleCntV[cs:ce:ce]}
		in.RLE = rle
	}
	return nil
}
