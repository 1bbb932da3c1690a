package loss

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/batch"
)

func bufOf[T any](v []T) *memory.Buffer {
	if len(v) == 0 {
		return memory.NewBufferBytes(nil)
	}
	return memory.NewBufferBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0]))))
}

// TestRecordInstancesAreTheLossTargets builds a record through the batch
// contract from a random case and checks that the loss sees the same
// targets in its instances (Targets is batch.Instances, aliasing the
// record's buffers) and computes the same loss.
func TestRecordInstancesAreTheLossTargets(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	out, tg := randomCase(rng, []int{2, 0, 3})
	g := out.Geometry
	b, err := batch.NewBuilder(64, 64, g.ProtoH, g.ProtoW)
	if err != nil {
		t.Fatal(err)
	}
	n, sumN := g.B, len(tg.Classes)
	bpi := make([]int32, n)
	offs := make([]int32, n+1)
	for i, c := range tg.BoxesPerImage {
		bpi[i] = int32(c)
		offs[i+1] = offs[i] + int32(c)
	}
	crowd := make([]uint8, sumN)
	crowd[sumN-1] = 1
	rec, err := b.Build(&batch.Columns{
		N: n, SumN: sumN,
		Images:   bufOf(make([]byte, n*3*64*64)),
		ImageIDs: bufOf(make([]int64, n)), OrigHeight: bufOf(make([]int32, n)), OrigWidth: bufOf(make([]int32, n)),
		Transforms:    bufOf(make([]float64, 6*n)),
		BoxesPerImage: bufOf(bpi), Offsets: bufOf(offs),
		Boxes: bufOf(tg.Boxes), Classes: bufOf(tg.Classes), Masks: bufOf(tg.Masks),
		IsCrowd: bufOf(crowd),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	got, err := batch.InstancesOf(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Boxes) != len(tg.Boxes) || &got.Boxes[0] != &tg.Boxes[0] || &got.Masks[0] != &tg.Masks[0] || &got.Classes[0] != &tg.Classes[0] {
		t.Fatal("targets do not alias the record's buffers")
	}
	if len(got.IsCrowd) != sumN || &got.IsCrowd[0] != &crowd[0] {
		t.Fatalf("crowd flags %v do not alias the record's column", got.IsCrowd)
	}
	got.IsCrowd = nil // compare the loss over the same instances below
	for i := range tg.BoxesPerImage {
		if got.BoxesPerImage[i] != tg.BoxesPerImage[i] {
			t.Fatalf("boxes_per_image %v, want %v", got.BoxesPerImage, tg.BoxesPerImage)
		}
	}
	c1, _ := NewCriterion(DefaultConfig(10))
	c2, _ := NewCriterion(DefaultConfig(10))
	r1, err := c1.Forward(out, tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c2.Forward(out, got, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Total != r2.Total {
		t.Errorf("total %v from the record, %v from the slices", r2.Total, r1.Total)
	}
}
