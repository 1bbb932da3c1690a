package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// DType names an element type as spelled in a safetensors header.
type DType string

// The element types segpipe reads and writes.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

// Size is the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, I16:
		return 2
	case I8, U8, Bool:
		return 1
	}
	return 0
}

// MaxHeaderLen bounds the JSON header a reader accepts (100 MB, as the
// reference implementation), so a corrupt length cannot trigger a huge
// allocation.
const MaxHeaderLen = 100 << 20

// metadataKey is the reserved header entry holding the string map.
const metadataKey = "__metadata__"

// ErrFormat is wrapped by every error caused by malformed file contents.
var ErrFormat = errors.New("safetensors: malformed file")

// Tensor is one named array: its dtype, shape and raw little-endian bytes.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte
}

// NumElements is the product of Shape (1 for a scalar).
func (t Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is the decoded content of a safetensors file.
type File struct {
	// Metadata is the optional "__metadata__" string map; nil when absent.
	Metadata map[string]string
	// Tensors maps names to tensors.
	Tensors map[string]Tensor
}

// New returns an empty File ready for Add.
func New() *File {
	return &File{Tensors: map[string]Tensor{}}
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Tensors))
	for k := range f.Tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Get returns the named tensor or an error naming it.
func (f *File) Get(name string) (Tensor, error) {
	t, ok := f.Tensors[name]
	if !ok {
		return Tensor{}, fmt.Errorf("safetensors: no tensor %q", name)
	}
	return t, nil
}

// Float32s returns the named tensor converted to float32 (see Tensor.Float32s).
func (f *File) Float32s(name string) ([]float32, []int, error) {
	t, err := f.Get(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := t.Float32s()
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return v, t.Shape, nil
}

// headerEntry is one tensor's JSON header record.
type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Header is a parsed, validated header: entries plus metadata.
type Header struct {
	Metadata map[string]string
	Entries  map[string]HeaderEntry
	// DataLen is the byte length the data section must have.
	DataLen int64
}

// HeaderEntry is a tensor's declared dtype, shape and byte span.
type HeaderEntry struct {
	DType DType
	Shape []int
	Begin int64
	End   int64
}

// ParseHeader decodes and validates the JSON header bytes (without the
// 8-byte length prefix). It checks dtypes, shapes, and that the spans tile
// [0, DataLen) exactly.
func ParseHeader(b []byte) (*Header, error) {
	b = bytes.TrimRight(b, " ")
	if len(b) == 0 || b[0] != '{' {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrFormat)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after header JSON", ErrFormat)
	}
	h := &Header{Entries: make(map[string]HeaderEntry, len(raw))}
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(raw))
	for name, msg := range raw {
		if name == metadataKey {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			continue
		}
		if name == "" {
			return nil, fmt.Errorf("%w: empty tensor name", ErrFormat)
		}
		var e headerEntry
		d := json.NewDecoder(bytes.NewReader(msg))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		size := e.DType.Size()
		if size == 0 {
			return nil, fmt.Errorf("%w: tensor %q: unknown dtype %q", ErrFormat, name, e.DType)
		}
		if e.Shape == nil {
			return nil, fmt.Errorf("%w: tensor %q: missing shape", ErrFormat, name)
		}
		numel := int64(1)
		for _, dim := range e.Shape {
			if dim < 0 {
				return nil, fmt.Errorf("%w: tensor %q: negative dimension in shape %v", ErrFormat, name, e.Shape)
			}
			if dim != 0 && numel > math.MaxInt64/int64(size)/int64(dim) {
				return nil, fmt.Errorf("%w: tensor %q: shape %v overflows", ErrFormat, name, e.Shape)
			}
			numel *= int64(dim)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin {
			return nil, fmt.Errorf("%w: tensor %q: bad data_offsets [%d, %d]", ErrFormat, name, begin, end)
		}
		if end-begin != numel*int64(size) {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] span %d bytes, shape %v of %s needs %d",
				ErrFormat, name, begin, end, end-begin, e.Shape, e.DType, numel*int64(size))
		}
		h.Entries[name] = HeaderEntry{DType: e.DType, Shape: e.Shape, Begin: begin, End: end}
		spans = append(spans, span{name, begin, end})
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.begin != b.begin {
			if a.begin < b.begin {
				return -1
			}
			return 1
		}
		if a.end != b.end {
			if a.end < b.end {
				return -1
			}
			return 1
		}
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	var pos int64
	for _, s := range spans {
		if s.begin != pos {
			if s.begin < pos {
				return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] overlap the previous tensor (ends at %d)", ErrFormat, s.name, s.begin, s.end, pos)
			}
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] leave a hole after byte %d", ErrFormat, s.name, s.begin, s.end, pos)
		}
		pos = s.end
	}
	h.DataLen = pos
	return h, nil
}

// Parse decodes a whole safetensors file held in b. Tensor data aliases b.
func Parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the 8-byte header length", ErrFormat, len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderLen {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d limit", ErrFormat, n, MaxHeaderLen)
	}
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d bytes after the length", ErrFormat, n, len(b)-8)
	}
	h, err := ParseHeader(b[8 : 8+n])
	if err != nil {
		return nil, err
	}
	data := b[8+n:]
	if int64(len(data)) != h.DataLen {
		return nil, fmt.Errorf("%w: data section is %d bytes, header describes %d", ErrFormat, len(data), h.DataLen)
	}
	f := &File{Metadata: h.Metadata, Tensors: make(map[string]Tensor, len(h.Entries))}
	for name, e := range h.Entries {
		f.Tensors[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[e.Begin:e.End:e.End]}
	}
	return f, nil
}

// Read reads a whole safetensors stream.
func Read(r io.Reader) (*File, error) {
	var lenBuf [8]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%w: reading header length: %v", ErrFormat, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderLen {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d limit", ErrFormat, n, MaxHeaderLen)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("%w: reading %d-byte header: %v", ErrFormat, n, err)
	}
	h, err := ParseHeader(hdr)
	if err != nil {
		return nil, err
	}
	data := make([]byte, h.DataLen)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("%w: reading %d data bytes: %v", ErrFormat, h.DataLen, err)
	}
	var extra [1]byte
	if k, _ := r.Read(extra[:]); k != 0 {
		return nil, fmt.Errorf("%w: bytes after the %d-byte data section", ErrFormat, h.DataLen)
	}
	f := &File{Metadata: h.Metadata, Tensors: make(map[string]Tensor, len(h.Entries))}
	for name, e := range h.Entries {
		f.Tensors[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[e.Begin:e.End:e.End]}
	}
	return f, nil
}

// ReadFile reads the safetensors file at path; errors name the path.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Write encodes f to w: header keys sorted, tensors laid out in sorted name
// order, header padded with spaces to a multiple of 8.
func Write(w io.Writer, f *File) error {
	names := f.Names()
	hdr := make(map[string]any, len(names)+1)
	if f.Metadata != nil {
		hdr[metadataKey] = f.Metadata
	}
	var off int64
	for _, name := range names {
		if name == "" || name == metadataKey {
			return fmt.Errorf("safetensors: invalid tensor name %q", name)
		}
		t := f.Tensors[name]
		if t.DType.Size() == 0 {
			return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, t.DType)
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: tensor %q: negative dimension in shape %v", name, t.Shape)
			}
		}
		if want := t.NumElements() * t.DType.Size(); len(t.Data) != want {
			return fmt.Errorf("safetensors: tensor %q: %d data bytes, shape %v of %s needs %d", name, len(t.Data), t.Shape, t.DType, want)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		hdr[name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("safetensors: encoding header: %w", err)
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, bytes.Repeat([]byte{' '}, pad)...)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	for _, name := range names {
		if _, err := w.Write(f.Tensors[name].Data); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes f to path atomically (mode 0644, through
// internal/atomicfile), so a crash never leaves a truncated file.
func WriteFile(path string, f *File) error {
	// A checkpoint is an ordinary data file: 0644.
	af, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return err
	}
	defer af.Abort()
	bw := newBufWriter(af)
	if err := Write(bw, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return af.Commit()
}
