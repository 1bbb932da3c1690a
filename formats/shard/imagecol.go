package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// The image column holds most of a shard's bytes, stored the way
// writerProps writes it: PLAIN byte arrays, uncompressed, no dictionary,
// a required top-level column. Through pqarrow each image is copied twice
// on its way into a record (page buffer, then a zeroed builder buffer),
// all of it memory touched for the first time, row group after row group.
// Read directly, a chunk costs one read into one buffer: the values are
// moved together in place (dropping the pages' headers and each value's
// length prefix) and the Binary array's data is that buffer. A chunk in
// any other layout, or one that does not parse, is left to pqarrow, which
// decides what it holds exactly as before.

// errNotPlainImages says a chunk is not in the layout read directly.
var errNotPlainImages = errors.New("not a plain uncompressed chunk")

// directImages turns reading chunks directly off, so that tests can
// compare against pqarrow.
var directImages = true

// imageLeaf returns the Parquet leaf index of the image column when it is
// among the leaves read and its chunks may be read directly, else -1.
func (r *ShardReader) imageLeaf() int {
	if !directImages {
		return -1
	}
	for _, fld := range r.fr.Manifest.Fields {
		if fld.Field.Name != ColImage || len(fld.Children) != 0 {
			continue
		}
		col := r.pf.MetaData().Schema.Column(fld.ColIndex)
		if col.PhysicalType() != parquet.Types.ByteArray || col.MaxDefinitionLevel() != 0 || col.MaxRepetitionLevel() != 0 {
			return -1
		}
		for _, l := range r.leaves {
			if l == fld.ColIndex {
				return l
			}
		}
	}
	return -1
}

// readImageChunk reads the image column's chunk of row group g as a Binary
// array of n values whose buffers come from mem. It returns
// errNotPlainImages (wrapped) when the chunk is not in the layout read
// directly; a read error otherwise.
func (r *ShardReader) readImageChunk(g, leaf int, n int64, mem memory.Allocator) (*array.Binary, error) {
	cc, err := r.pf.MetaData().RowGroup(g).ColumnChunk(leaf)
	if err != nil {
		return nil, err
	}
	if cc.Compression() != compress.Codecs.Uncompressed || cc.HasDictionaryPage() || cc.CryptoMetadata() != nil ||
		cc.NumValues() != n || n > math.MaxInt32 {
		return nil, errNotPlainImages
	}
	off, size := cc.DataPageOffset(), cc.TotalCompressedSize()
	// checkChunkBounds has checked the range against the file's size.
	if size <= 0 || size > math.MaxInt32 || off < 0 || off > r.f.Size()-size {
		return nil, errNotPlainImages
	}
	data := mem.Allocate(int(size))
	if _, err := r.f.ReadAt(data, off); err != nil {
		mem.Free(data)
		return nil, err
	}
	offsets := mem.Allocate(4 * (int(n) + 1))
	end, err := plainImages(data, offsetsOf(offsets), int(n))
	if err != nil {
		mem.Free(data)
		mem.Free(offsets)
		return nil, err
	}
	ob, whole := memory.NewBufferWithAllocator(offsets, mem), memory.NewBufferWithAllocator(data, mem)
	defer ob.Release()
	defer whole.Release()
	// The values end before the chunk did; the allocation is freed whole.
	db := memory.SliceBuffer(whole, 0, end)
	defer db.Release()
	ad := array.NewData(arrow.BinaryTypes.Binary, int(n), []*memory.Buffer{nil, ob, db}, nil, 0, 0)
	defer ad.Release()
	return array.NewBinaryData(ad), nil
}

// offsetsOf views an allocator's bytes (8-byte aligned) as int32 offsets.
func offsetsOf(b []byte) []int32 {
	return arrow.Int32Traits.CastFromBytes(b)
}

// plainImages parses the pages of a PLAIN, uncompressed, required
// BYTE_ARRAY chunk in data and moves its n values together at the front of
// data, writing their n+1 offsets. It returns the values' total length.
// Anything but data pages holding exactly n values that fill the chunk is
// refused with errNotPlainImages; nothing in data is trusted.
func plainImages(data []byte, offsets []int32, n int) (int, error) {
	if len(offsets) != n+1 {
		return 0, fmt.Errorf("%w: %d offsets for %d values", errNotPlainImages, len(offsets), n)
	}
	offsets[0] = 0
	pos, w, got := 0, 0, 0
	for pos < len(data) {
		h, hlen, err := readPageHeader(data[pos:])
		if err != nil {
			return 0, fmt.Errorf("%w: page at %d: %v", errNotPlainImages, pos, err)
		}
		pos += hlen
		if h.compressed != h.uncompressed || h.compressed < 0 || h.compressed > len(data)-pos {
			return 0, fmt.Errorf("%w: page at %d: %d of %d bytes", errNotPlainImages, pos, h.compressed, len(data)-pos)
		}
		body := data[pos : pos+h.compressed]
		if h.hasCRC && crc32.ChecksumIEEE(body) != h.crc {
			return 0, fmt.Errorf("%w: page at %d fails its checksum", errNotPlainImages, pos)
		}
		pos += h.compressed
		switch {
		case h.kind != pageData && h.kind != pageDataV2:
			return 0, fmt.Errorf("%w: page of type %d", errNotPlainImages, h.kind)
		case h.encoding != encodingPlain || h.levels || h.nulls != 0:
			return 0, fmt.Errorf("%w: encoding %d, levels %v, %d nulls", errNotPlainImages, h.encoding, h.levels, h.nulls)
		case h.values < 0 || h.values > n-got:
			return 0, fmt.Errorf("%w: %d values in a page, %d left", errNotPlainImages, h.values, n-got)
		}
		// body aliases data at or after w: each value moves left (copy
		// handles the overlap) past what was dropped before it.
		start := pos - h.compressed
		p := start
		for k := 0; k < h.values; k++ {
			if pos-p < 4 {
				return 0, fmt.Errorf("%w: value %d: no length", errNotPlainImages, got)
			}
			l := int(binary.LittleEndian.Uint32(data[p:]))
			p += 4
			if l < 0 || l > pos-p {
				return 0, fmt.Errorf("%w: value %d: length %d past its page", errNotPlainImages, got, l)
			}
			w += copy(data[w:], data[p:p+l])
			p += l
			got++
			offsets[got] = int32(w)
		}
		if p != pos {
			return 0, fmt.Errorf("%w: %d bytes after a page's values", errNotPlainImages, pos-p)
		}
	}
	if got != n {
		return 0, fmt.Errorf("%w: %d values, want %d", errNotPlainImages, got, n)
	}
	return w, nil
}

// Parquet's page types and the PLAIN encoding (parquet.thrift).
const (
	pageData      = 0
	pageDataV2    = 3
	encodingPlain = 0
)

// pageHeader is what plainImages needs of a Parquet PageHeader.
type pageHeader struct {
	kind                     int
	uncompressed, compressed int
	crc                      uint32
	hasCRC                   bool
	values, nulls, encoding  int
	levels                   bool // v2: the page declares level bytes
}

// readPageHeader decodes a Thrift compact-protocol PageHeader at the start
// of b and returns it with its encoded length.
func readPageHeader(b []byte) (pageHeader, int, error) {
	h := pageHeader{kind: -1, encoding: -1, values: -1}
	t := thriftReader{b: b}
	var haveData bool
	err := t.fields(func(id int16, typ byte) error {
		switch {
		case id == 1 && typ == thriftI32:
			h.kind = int(t.i32())
		case id == 2 && typ == thriftI32:
			h.uncompressed = int(t.i32())
		case id == 3 && typ == thriftI32:
			h.compressed = int(t.i32())
		case id == 4 && typ == thriftI32:
			h.crc, h.hasCRC = uint32(t.i32()), true
		case id == 5 && typ == thriftStruct: // DataPageHeader
			haveData = true
			return t.dataPage(&h, false)
		case id == 8 && typ == thriftStruct: // DataPageHeaderV2
			haveData = true
			return t.dataPage(&h, true)
		default:
			t.skip(typ, 0)
		}
		return t.err
	})
	if err != nil {
		return h, 0, err
	}
	if !haveData && (h.kind == pageData || h.kind == pageDataV2) {
		return h, 0, errors.New("data page without its header")
	}
	return h, t.pos, nil
}

// dataPage decodes a DataPageHeader, or with v2 a DataPageHeaderV2, into
// h. Their integer fields are all i32; the rest (statistics, v2's
// is_compressed) is skipped.
func (t *thriftReader) dataPage(h *pageHeader, v2 bool) error {
	return t.fields(func(id int16, typ byte) error {
		if typ != thriftI32 {
			t.skip(typ, 0)
			return t.err
		}
		v := int(t.i32())
		switch {
		case id == 1:
			h.values = v
		case id == 2 && !v2, id == 4 && v2:
			h.encoding = v
		case id == 2 && v2:
			h.nulls = v
		case (id == 5 || id == 6) && v2: // level byte lengths
			h.levels = h.levels || v != 0
		}
		return t.err
	})
}

// Thrift compact-protocol type codes.
const (
	thriftStop   = 0
	thriftTrue   = 1
	thriftFalse  = 2
	thriftByte   = 3
	thriftI16    = 4
	thriftI32    = 5
	thriftI64    = 6
	thriftDouble = 7
	thriftBinary = 8
	thriftList   = 9
	thriftSet    = 10
	thriftMap    = 11
	thriftStruct = 12
)

// maxThriftDepth bounds the nesting that skip follows.
const maxThriftDepth = 16

// thriftReader decodes the Thrift compact protocol from a byte slice. The
// first error sticks; reads after it return zero values.
type thriftReader struct {
	b   []byte
	pos int
	err error
}

func (t *thriftReader) fail(msg string) {
	if t.err == nil {
		t.err = fmt.Errorf("thrift at byte %d: %s", t.pos, msg)
	}
}

func (t *thriftReader) byte() byte {
	if t.err != nil || t.pos >= len(t.b) {
		t.fail("truncated")
		return 0
	}
	c := t.b[t.pos]
	t.pos++
	return c
}

func (t *thriftReader) uvarint() uint64 {
	if t.err != nil {
		return 0
	}
	v, n := binary.Uvarint(t.b[t.pos:])
	if n <= 0 {
		t.fail("bad varint")
		return 0
	}
	t.pos += n
	return v
}

func (t *thriftReader) i32() int32 {
	v := t.uvarint()
	if v > math.MaxUint32 {
		t.fail("i32 out of range")
		return 0
	}
	return int32(uint32(v)>>1) ^ -int32(uint32(v)&1)
}

// fields calls fn for each field of a struct until its stop byte; fn must
// consume the field's value.
func (t *thriftReader) fields(fn func(id int16, typ byte) error) error {
	var last int16
	for t.err == nil {
		c := t.byte()
		typ := c & 0x0f
		if t.err != nil || typ == thriftStop {
			break
		}
		id := last + int16(c>>4)
		if c>>4 == 0 {
			v := t.uvarint()
			if v > math.MaxUint16 {
				t.fail("field id out of range")
				break
			}
			id = int16(uint16(v)>>1) ^ -int16(uint16(v)&1)
		}
		last = id
		if err := fn(id, typ); err != nil {
			return err
		}
	}
	return t.err
}

// skip consumes one value of type typ.
func (t *thriftReader) skip(typ byte, depth int) {
	if depth > maxThriftDepth {
		t.fail("nested too deep")
		return
	}
	switch typ {
	case thriftTrue, thriftFalse:
		// a struct field's boolean lives in its type code
	case thriftByte:
		t.byte()
	case thriftI16, thriftI32, thriftI64:
		t.uvarint()
	case thriftDouble:
		t.bytes(8)
	case thriftBinary:
		t.bytes(t.uvarint())
	case thriftList, thriftSet:
		c := t.byte()
		size, elem := uint64(c>>4), c&0x0f
		if size == 15 {
			size = t.uvarint()
		}
		t.elements(size, elem, depth)
	case thriftMap:
		size := t.uvarint()
		if size == 0 {
			return
		}
		kv := t.byte()
		if size > uint64(len(t.b)-t.pos) {
			t.fail("map larger than its bytes")
			return
		}
		for i := uint64(0); i < size && t.err == nil; i++ {
			t.skipElement(kv>>4, depth)
			t.skipElement(kv&0x0f, depth)
		}
	case thriftStruct:
		t.fields(func(_ int16, typ byte) error { t.skip(typ, depth+1); return t.err })
	default:
		t.fail(fmt.Sprintf("unknown type %d", typ))
	}
}

func (t *thriftReader) elements(size uint64, elem byte, depth int) {
	// Every element takes at least a byte: a size past what is left is
	// a lie, refused before looping over it.
	if size > uint64(len(t.b)-t.pos) {
		t.fail("collection larger than its bytes")
		return
	}
	for i := uint64(0); i < size && t.err == nil; i++ {
		t.skipElement(elem, depth)
	}
}

// skipElement consumes a collection element: there, booleans take a byte.
func (t *thriftReader) skipElement(typ byte, depth int) {
	if typ == thriftTrue || typ == thriftFalse {
		t.byte()
		return
	}
	t.skip(typ, depth+1)
}

func (t *thriftReader) bytes(n uint64) {
	if t.err != nil {
		return
	}
	if n > uint64(len(t.b)-t.pos) {
		t.fail("truncated")
		return
	}
	t.pos += int(n)
}
