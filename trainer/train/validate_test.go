package train

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
)

// crowdRows makes images of 96×64 pixels with two objects given as polygons
// and one crowd region given as RLE, the block [60,90)×[36,60).
func crowdRows(t *testing.T, n int) []shard.Image {
	t.Helper()
	const w, h = 96, 64
	rows := make([]shard.Image, n)
	for i := range rows {
		im := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				im.Set(x, y, color.RGBA{uint8(40 + 9*i), 60, 80, 255})
			}
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, im); err != nil {
			t.Fatal(err)
		}
		x0 := float32(4 + 2*i)
		var counts []uint32 // column-major: zeros, then per crowd column 24 ones
		counts = append(counts, 60*h+36)
		for c := 60; c < 90; c++ {
			counts = append(counts, 24)
			if c < 89 {
				counts = append(counts, h-24)
			}
		}
		counts = append(counts, uint32((w-90)*h+(h-60)))
		rows[i] = shard.Image{ImageID: int64(100 + i), Width: w, Height: h, Format: "png", Bytes: buf.Bytes(),
			Instances: []shard.Instance{
				{AnnID: int64(10 * i), Class: 0, Polygons: [][]float32{{x0, 6, x0 + 30, 6, x0 + 30, 30, x0, 30}}},
				{AnnID: int64(10*i + 1), Class: 1, Polygons: [][]float32{{40, 8, 56, 8, 56, 28, 40, 28}}},
				{AnnID: int64(10*i + 2), Class: 0, IsCrowd: true, BBox: [4]float32{60, 36, 30, 24},
					RLE: &shard.RLE{Height: h, Width: w, Counts: counts}},
			}}
	}
	return rows
}

// TestValidateIgnoresCrowdRegions scores a predictor that finds every object
// exactly and, with the highest score, also boxes each crowd region: COCOeval
// ignores the latter, so both metrics must be perfect. Were crowd regions
// missing from the truth, those top-scored detections would be false
// positives and AP would fall below 1.
func TestValidateIgnoresCrowdRegions(t *testing.T) {
	rows := crowdRows(t, 6)
	vc := ValConfig{Imgsz: 64, Batch: 4, Workers: 1, Conf: 0.001, MaxDet: 300}
	crowdSeen := 0
	infer := func(rec arrow.RecordBatch) ([][]model.Detection, [][]float32, error) {
		tg, err := batch.InstancesOf(rec)
		if err != nil {
			return nil, nil, err
		}
		info, err := predict.ReadImageInfo(rec)
		if err != nil {
			return nil, nil, err
		}
		dets := make([][]model.Detection, len(info))
		protos := make([][]float32, len(info))
		off := 0
		for i, inf := range info {
			cells := inf.Hp * inf.Wp
			// One prototype per detection: +20 on its mask, -20 elsewhere,
			// selected by a one-hot coefficient vector.
			const nm = 3
			protos[i] = make([]float32, nm*cells)
			for c := range protos[i] {
				protos[i][c] = -20
			}
			add := func(slot int, box [4]float32, class int, score float32, on func(r, c int) bool) {
				for r := range inf.Hp {
					for c := range inf.Wp {
						if on(r, c) {
							protos[i][slot*cells+r*inf.Wp+c] = 20
						}
					}
				}
				coef := make([]float32, nm)
				coef[slot] = 1
				dets[i] = append(dets[i], model.Detection{Box: box, Score: score, Class: class, Coeffs: coef})
			}
			// The crowd region, mapped from source pixels by the batch's
			// transform, whether or not the truth carries it.
			a := inf.Transform
			cx0, cy0 := float32(a[0]*60+a[1]*36+a[2]), float32(a[3]*60+a[4]*36+a[5])
			cx1, cy1 := float32(a[0]*90+a[1]*60+a[2]), float32(a[3]*90+a[4]*60+a[5])
			s := inf.Stride
			add(0, [4]float32{cx0, cy0, cx1, cy1}, 0, 0.95, func(r, c int) bool {
				x, y := (float32(c)+0.5)*s, (float32(r)+0.5)*s
				return x > cx0 && x < cx1 && y > cy0 && y < cy1
			})
			slot := 1
			for k := off; k < off+tg.BoxesPerImage[i]; k++ {
				if tg.IsCrowd[k] != 0 {
					crowdSeen++
					continue
				}
				m := tg.Masks[k*cells : (k+1)*cells]
				add(slot, [4]float32(tg.Boxes[4*k:4*k+4]), int(tg.Classes[k]), 0.9-0.1*float32(slot), func(r, c int) bool { return m[r*inf.Wp+c] != 0 })
				slot++
			}
			off += tg.BoxesPerImage[i]
		}
		return dets, protos, nil
	}
	box, mask, err := validate(context.Background(), Local(&pipeline.SliceSource{Rows: rows, BlockSize: 4}), vc, infer)
	if err != nil {
		t.Fatal(err)
	}
	if crowdSeen != len(rows) {
		t.Fatalf("validation batches carried %d crowd regions, want %d", crowdSeen, len(rows))
	}
	if box.Stats[0] != 1 || mask.Stats[0] != 1 {
		t.Errorf("box mAP %v, mask mAP %v with crowd detections; want 1 and 1", box.Stats[0], mask.Stats[0])
	}
}
