package batch

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func bufOf[T any](v []T) *memory.Buffer {
	if len(v) == 0 {
		return memory.NewBufferBytes(nil)
	}
	n := len(v) * int(unsafe.Sizeof(v[0]))
	return memory.NewBufferBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), n))
}

// sample builds a 2-image batch with 1 and 2 instances on a 8x12 canvas, mask grid 2x3.
func sample(t *testing.T, mem memory.Allocator) (*Builder, *Columns, []byte) {
	t.Helper()
	b, err := NewBuilder(8, 12, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 2*3*8*12)
	for i := range img {
		img[i] = byte(i)
	}
	masks := []byte{1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}
	c := &Columns{
		N: 2, SumN: 3,
		Images:        bufOf(img),
		ImageIDs:      bufOf([]int64{42, 7}),
		OrigHeight:    bufOf([]int32{480, 640}),
		OrigWidth:     bufOf([]int32{640, 480}),
		Transforms:    bufOf([]float64{1, 0, 0, 0, 1, 0, 0.5, 0, 3, 0, 0.5, 4}),
		BoxesPerImage: bufOf([]int32{1, 2}),
		Offsets:       bufOf([]int32{0, 1, 3}),
		Boxes:         bufOf([]float32{0, 0, 4, 4, 1, 1, 2, 2, 3, 3, 8, 7}),
		Classes:       bufOf([]int32{5, 0, 79}),
		Masks:         bufOf(masks),
	}
	return b, c, masks
}

func TestBuildIsZeroCopy(t *testing.T) {
	b, c, masks := sample(t, nil)
	rec, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	ms, err := MaskStack(rec)
	if err != nil {
		t.Fatal(err)
	}
	if &ms.Data[0] != &masks[0] {
		t.Fatalf("mask stack at %p, caller buffer at %p: copied", &ms.Data[0], &masks[0])
	}
	if ms.Count != 3 || ms.Shape[0] != 2 || ms.Shape[1] != 3 {
		t.Fatalf("mask stack %d x %v", ms.Count, ms.Shape)
	}
	if got := ms.Offsets; len(got) != 3 || got[1] != 1 || got[2] != 3 {
		t.Fatalf("offsets %v", got)
	}
	im, err := ImageTensor(rec)
	if err != nil {
		t.Fatal(err)
	}
	if &im.Data[0] != &c.Images.Bytes()[0] || im.Count != 2 {
		t.Fatal("image column copied or wrong count")
	}
	if !bytes.Equal(ms.At(2), masks[12:18]) {
		t.Fatal("At(2) wrong")
	}
}

// ipcRoundTrip writes rec as an Arrow IPC stream and reads it back; the
// caller releases the result.
func ipcRoundTrip(t *testing.T, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Next() {
		t.Fatal("no record read back", r.Err())
	}
	got := r.RecordBatch()
	got.Retain()
	return got
}

func TestIPCRoundTripKeepsTensorType(t *testing.T) {
	b, c, masks := sample(t, nil)
	rec, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	got := ipcRoundTrip(t, rec)
	defer got.Release()
	it, ok := got.Column(0).DataType().(*FixedShapeTensorType)
	if !ok {
		t.Fatalf("image column came back as %s", got.Column(0).DataType())
	}
	if s := it.Shape(); len(s) != 3 || s[0] != 3 || s[1] != 8 || s[2] != 12 {
		t.Fatalf("shape %v", s)
	}
	if md := it.Serialize(); md != `{"shape":[3,8,12],"dim_names":["C","H","W"]}` {
		t.Fatalf("metadata %s", md)
	}
	ms, err := MaskStack(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ms.Data, masks) {
		t.Fatalf("masks %v != %v", ms.Data, masks)
	}
	if !array.RecordEqual(rec, got) {
		t.Fatal("record changed through IPC")
	}
	if got.Schema().Metadata().FindKey(MetaMaskStride) < 0 {
		t.Fatal("stride metadata lost")
	}
}

func TestBuildRejectsInconsistentColumns(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Columns)
	}{
		{"offsets disagree", func(c *Columns) { c.Offsets = bufOf([]int32{0, 2, 3}) }},
		{"sum mismatch", func(c *Columns) { c.SumN = 2 }},
		{"short masks", func(c *Columns) { c.Masks = bufOf(make([]byte, 17)) }},
		{"short images", func(c *Columns) { c.Images = bufOf(make([]byte, 10)) }},
		{"missing boxes", func(c *Columns) { c.Boxes = nil }},
		{"offsets not from zero", func(c *Columns) { c.Offsets = bufOf([]int32{1, 2, 4}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, c, _ := sample(t, nil)
			tc.edit(c)
			if rec, err := b.Build(c); err == nil {
				rec.Release()
				t.Fatal("accepted")
			}
		})
	}
}

func TestReleaseReturnsMemory(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b, c, _ := sample(t, nil)
	m := memory.NewResizableBuffer(mem)
	m.Resize(18)
	c.Masks = m
	rec, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	m.Release()
	if mem.CurrentAlloc() == 0 {
		t.Fatal("record does not hold the mask buffer")
	}
	rec.Release()
	mem.AssertSize(t, 0)
}

func TestDeserializeRejectsBadMetadata(t *testing.T) {
	st := arrow.FixedSizeListOfNonNullable(6, arrow.PrimitiveTypes.Uint8)
	for _, md := range []string{`{"shape":[2,2]}`, `{}`, `nope`, `{"shape":[2,3],"permutation":[0,0]}`, `{"shape":[2,3],"dim_names":["a"]}`} {
		if _, err := (&FixedShapeTensorType{}).Deserialize(st, md); err == nil {
			t.Errorf("%s accepted", md)
		}
	}
	if _, err := (&FixedShapeTensorType{}).Deserialize(st, `{"shape":[2,3],"permutation":[1,0]}`); err != nil {
		t.Error(err)
	}
}

func TestCrowdFlags(t *testing.T) {
	b, c, _ := sample(t, nil)
	rec, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := CrowdFlags(rec)
	rec.Release()
	if err != nil || !bytes.Equal(got, []byte{0, 0, 0}) {
		t.Fatalf("no crowd buffer: %v, %v", got, err)
	}

	c.IsCrowd = bufOf([]uint8{0, 1, 0})
	rec, err = b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	back := ipcRoundTrip(t, rec)
	defer back.Release()
	got, err = CrowdFlags(back)
	if err != nil || !bytes.Equal(got, []byte{0, 1, 0}) {
		t.Fatalf("after IPC: %v, %v", got, err)
	}

	c.IsCrowd = bufOf([]uint8{0, 2, 0})
	if rec, err := b.Build(c); err == nil {
		rec.Release()
		t.Fatal("iscrowd 2 accepted")
	}
	c.IsCrowd = bufOf([]uint8{0, 1})
	if rec, err := b.Build(c); err == nil {
		rec.Release()
		t.Fatal("2 flags for 3 instances accepted")
	}
}
