package pipeline

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
)

// An ordinary (iscrowd 0) instance whose mask is an RLE, as SA-1B stores
// every mask, is trained on like a polygon one: kept without KeepCrowd,
// rasterised from its RLE, and not flagged iscrowd. Its mask matches the
// same shape given as a polygon but for cells on the boundary.
func TestRLEMaskedInstances(t *testing.T) {
	poly := synth(t, 12, 0)
	rle := synth(t, 12, 0)
	for i := range rle {
		r := &rle[i]
		w, h := int(r.Width), int(r.Height)
		in := &r.Instances[1]
		tri := in.Polygons[0]
		var counts []uint32
		prev, n := false, uint32(0)
		for x := 0; x < w; x++ { // column-major, starting with a run of zeros
			for y := 0; y < h; y++ {
				if on := inside(tri, float64(x)+0.5, float64(y)+0.5); on != prev {
					counts, n, prev = append(counts, n), 0, on
				}
				n++
			}
		}
		counts = append(counts, n)
		x0, y0, x1, y1 := float32(w), float32(h), float32(0), float32(0)
		for k := 0; k < len(tri); k += 2 {
			x0, y0, x1, y1 = min(x0, tri[k]), min(y0, tri[k+1]), max(x1, tri[k]), max(y1, tri[k+1])
		}
		*in = shard.Instance{AnnID: in.AnnID, Class: in.Class, BBox: [4]float32{x0, y0, x1 - x0, y1 - y0},
			RLE: &shard.RLE{Height: int32(h), Width: int32(w), Counts: counts}}
	}
	for _, val := range []bool{false, true} {
		cfg := testConfig()
		cfg.Val, cfg.Epochs, cfg.Stride = val, 1, 1
		cells := func(rows []shard.Image) (instances, on int) {
			res := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, -1)
			defer res.release()
			for _, rec := range res.recs {
				flags, err := batch.CrowdFlags(rec)
				if err != nil {
					t.Fatal(err)
				}
				ms, err := batch.MaskStack(rec)
				if err != nil {
					t.Fatal(err)
				}
				classes := rec.Column(rec.Schema().FieldIndices(batch.ColClasses)[0]).(*array.List).ListValues().(*array.Int32)
				for k := range ms.Count {
					if flags[k] != 0 {
						t.Fatalf("val=%v: instance %d (class %d) flagged iscrowd", val, k, classes.Value(k))
					}
					instances++
					for _, v := range ms.At(k) {
						on += int(v)
					}
				}
			}
			return instances, on
		}
		pi, pc := cells(poly)
		ri, rc := cells(rle)
		if ri != pi || rc == 0 || rc < pc*8/10 || rc > pc*12/10 {
			t.Fatalf("val=%v: RLE-masked %d instances, %d ON cells; as polygons %d, %d", val, ri, rc, pi, pc)
		}
	}
}
