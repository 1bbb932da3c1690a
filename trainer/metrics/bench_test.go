package metrics

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/segpipe/segpipe/formats/rle"
)

// synthScene is a synthetic COCO-like evaluation: images of 480×640, about
// 7 ground-truth instances each over 80 categories, 100 detections per
// image (jittered copies of the ground truth plus false positives).
type synthScene struct {
	ds   *Dataset
	dets []Detection
}

var (
	sceneOnce sync.Once
	scene     *synthScene
)

func synthetic(tb testing.TB, images, detsPerImage int) *synthScene {
	r := rand.New(rand.NewPCG(11, 12))
	const H, W = 480, 640
	ds := &Dataset{imgIdx: map[int64]int{}, catIdx: map[int64]int{}}
	for c := 1; c <= 80; c++ {
		ds.catIdx[int64(c)] = len(ds.Categories)
		ds.Categories = append(ds.Categories, Category{ID: int64(c)})
	}
	ds.byImage = make([][]int32, images)
	var dets []Detection
	poly := func(cx, cy, rx, ry float64) []float64 {
		// a 12-gon ellipse, like a coarse COCO polygon
		p := make([]float64, 0, 24)
		for k := 0; k < 12; k++ {
			a := float64(k) / 12 * 6.283185307179586
			p = append(p, cx+rx*math.Cos(a)*(0.9+0.2*r.Float64()), cy+ry*math.Sin(a)*(0.9+0.2*r.Float64()))
		}
		return p
	}
	for i := 0; i < images; i++ {
		id := int64(i + 1)
		ds.imgIdx[id] = i
		ds.Images = append(ds.Images, Image{ID: id, Height: H, Width: W})
		type inst struct {
			cx, cy, rx, ry float64
			cat            int64
		}
		var gts []inst
		for g := 0; g < 3+r.IntN(9); g++ {
			s := []float64{8, 30, 120}[r.IntN(3)] * (0.5 + r.Float64())
			in := inst{cx: r.Float64() * W, cy: r.Float64() * H, rx: s, ry: s * (0.5 + r.Float64()), cat: int64(1 + r.IntN(80))}
			gts = append(gts, in)
			m, err := rle.FromPolygon(poly(in.cx, in.cy, in.rx, in.ry), H, W)
			if err != nil {
				tb.Fatal(err)
			}
			ds.byImage[i] = append(ds.byImage[i], int32(len(ds.Annotations)))
			ds.Annotations = append(ds.Annotations, Annotation{
				ID: int64(len(ds.Annotations) + 1), ImageID: id, CategoryID: in.cat,
				Bbox: m.Bbox(), Area: float64(m.Area()), IsCrowd: r.IntN(30) == 0, hasBbox: true,
			})
			ds.masks = append(ds.masks, m)
		}
		for d := 0; d < detsPerImage; d++ {
			var in inst
			if d < 4*len(gts) {
				g := gts[d%len(gts)]
				j := 0.1 + 0.1*r.Float64()
				in = inst{g.cx + g.rx*j*r.NormFloat64(), g.cy + g.ry*j*r.NormFloat64(), g.rx * (1 + j*r.NormFloat64()), g.ry * (1 + j*r.NormFloat64()), g.cat}
			} else {
				s := 4 + r.Float64()*150
				in = inst{r.Float64() * W, r.Float64() * H, s, s * (0.5 + r.Float64()), int64(1 + r.IntN(80))}
			}
			m, err := rle.FromPolygon(poly(in.cx, in.cy, in.rx, in.ry), H, W)
			if err != nil {
				tb.Fatal(err)
			}
			dets = append(dets, Detection{
				ID: int64(len(dets) + 1), ImageID: id, CategoryID: in.cat,
				Score: float64(r.IntN(1000)) / 1000, Bbox: m.Bbox(), Area: float64(m.Area()), Mask: NewMask(m),
			})
		}
	}
	return &synthScene{ds: ds, dets: dets}
}

// denseIoUMatrix is the baseline: decode every mask of the cell to a dense
// H×W byte image and count pixels, as a straightforward dense
// implementation would.
func denseIoUMatrix(out []float64, dts, gts []rle.RLE, crowd []bool) {
	dec := func(r rle.RLE) []byte {
		m, err := r.Mask(nil)
		if err != nil {
			panic(err)
		}
		return m
	}
	gd := make([][]byte, len(gts))
	for g := range gts {
		gd[g] = dec(gts[g])
	}
	for d := range dts {
		dm := dec(dts[d])
		for g := range gts {
			var i, u, a int
			for k, v := range dm {
				w := gd[g][k]
				if v != 0 {
					a++
				}
				if v != 0 && w != 0 {
					i++
				}
				if v != 0 || w != 0 {
					u++
				}
			}
			o := 0.0
			if i > 0 {
				if crowd[g] {
					u = a
				}
				o = float64(i) / float64(u)
			}
			out[d*len(gts)+g] = o
		}
	}
}

// BenchmarkEvaluate scores 5,000 images × 100 detections (bbox and segm,
// IoU on runs) and, on a 50-image slice of the same scene, the dense-mask
// IoU baseline. Each reports images/s.
func BenchmarkEvaluate(b *testing.B) {
	sceneOnce.Do(func() { scene = synthetic(b, 5000, 100) })
	sub := subScene(scene, 50)
	run := func(b *testing.B, s *synthScene, typ IoUType) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Evaluate(s.ds, s.dets, typ); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(s.ds.Images))*float64(b.N)/b.Elapsed().Seconds(), "images/s")
	}
	b.Run("5000x100/bbox", func(b *testing.B) { run(b, scene, BBox) })
	b.Run("5000x100/segm-runs", func(b *testing.B) { run(b, scene, Segm) })
	b.Run("50x100/segm-runs", func(b *testing.B) { run(b, sub, Segm) })
	b.Run("50x100/segm-dense-baseline", func(b *testing.B) {
		maskIoUMatrix = denseIoUMatrix
		defer func() { maskIoUMatrix = rle.IoUMatrix }()
		run(b, sub, Segm)
	})
}

// subScene keeps the first n images of s.
func subScene(s *synthScene, n int) *synthScene {
	ds := &Dataset{Categories: s.ds.Categories, catIdx: s.ds.catIdx, imgIdx: map[int64]int{}}
	ds.Images = s.ds.Images[:n]
	for i, im := range ds.Images {
		ds.imgIdx[im.ID] = i
	}
	ds.byImage = s.ds.byImage[:n]
	ds.Annotations, ds.masks = s.ds.Annotations, s.ds.masks
	var dets []Detection
	for _, d := range s.dets {
		if _, ok := ds.imgIdx[d.ImageID]; ok {
			dets = append(dets, d)
		}
	}
	return &synthScene{ds: ds, dets: dets}
}

// TestDenseBaselineAgrees keeps the benchmark's baseline honest: on a small
// scene it gives the same statistics as the run-length path.
func TestDenseBaselineAgrees(t *testing.T) {
	s := synthetic(t, 3, 30)
	want, err := Evaluate(s.ds, s.dets, Segm)
	if err != nil {
		t.Fatal(err)
	}
	maskIoUMatrix = denseIoUMatrix
	defer func() { maskIoUMatrix = rle.IoUMatrix }()
	got, err := Evaluate(s.ds, s.dets, Segm)
	if err != nil {
		t.Fatal(err)
	}
	if got.Stats != want.Stats {
		t.Fatalf("dense %v\nruns  %v", got.Stats, want.Stats)
	}
	if want.Stats[0] <= 0 {
		t.Fatalf("scene scores nothing: %v", want.Stats)
	}
}

// BenchmarkEpochMetricAdd measures one validation image on a 160×160 grid
// (640 canvas, stride 4) with 10 ground-truth instances and 100
// predictions given as mask probabilities, the trainer's per-image cost.
func BenchmarkEpochMetricAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	const g = 160
	img := &GridImage{Affine: [6]float64{0.5, 0, 0, 0, 0.5, 80}, GridH: g, GridW: g}
	blob := func() ([]uint8, [4]float64) {
		m := make([]uint8, g*g)
		x0, y0 := r.IntN(g-20), r.IntN(g-20)
		w, h := 4+r.IntN(g-x0-4), 4+r.IntN(g-y0-4)
		for y := y0; y < y0+h; y++ {
			for x := x0; x < x0+w; x++ {
				m[y*g+x] = 1
			}
		}
		return m, [4]float64{float64(x0 * 4), float64(y0 * 4), float64((x0 + w) * 4), float64((y0 + h) * 4)}
	}
	var gtMasks [][]uint8
	var gtBoxes [][4]float64
	for i := 0; i < 10; i++ {
		m, bx := blob()
		gtMasks, gtBoxes = append(gtMasks, m), append(gtBoxes, bx)
		img.Truth.Masks = append(img.Truth.Masks, m...)
		img.Truth.Boxes = append(img.Truth.Boxes, scaleBox(bx, 1)...)
		img.Truth.Classes = append(img.Truth.Classes, int32(i%5))
	}
	for i := 0; i < 100; i++ {
		m, bx := blob()
		if i < 30 {
			m, bx = gtMasks[i%10], gtBoxes[i%10]
		}
		for _, v := range m {
			img.Pred.MaskProbs = append(img.Pred.MaskProbs, float32(v)*0.6+0.2*r.Float32())
		}
		img.Pred.Boxes = append(img.Pred.Boxes, scaleBox(bx, 1)...)
		img.Pred.Classes = append(img.Pred.Classes, int32(i%5))
		img.Pred.Scores = append(img.Pred.Scores, r.Float32())
	}
	b.Run("add", func(b *testing.B) {
		m := NewEpochMetric(GridConfig{})
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Add(img); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
		b.StopTimer()
		if box, mask := m.Result(); box.Stats[0] <= 0 || mask.Stats[0] <= 0 {
			b.Fatalf("benchmark scene scores nothing: %v %v", box.Stats, mask.Stats)
		}
	})
	// The floor: reading every predicted probability once, which any
	// exact metric on thresholded masks must do.
	b.Run("threshold-scan-floor", func(b *testing.B) {
		n := 0
		for b.Loop() {
			for _, p := range img.Pred.MaskProbs {
				if p > 0.5 {
					n++
				}
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
		if n == 0 {
			b.Fatal("no foreground")
		}
	})
}

// BenchmarkReadResults parses a results file of 20,000 detections (200
// images × 100) as compressed-RLE segm results and as boxes.
func BenchmarkReadResults(b *testing.B) {
	s := synthetic(b, 200, 100)
	var segm, box []byte
	segm, box = append(segm, '['), append(box, '[')
	for i, d := range s.dets {
		if i > 0 {
			segm, box = append(segm, ",\n"...), append(box, ",\n"...)
		}
		r, err := d.Mask.RLE()
		if err != nil {
			b.Fatal(err)
		}
		segm = fmt.Appendf(segm, `{"image_id":%d,"category_id":%d,"segmentation":{"size":[%d,%d],"counts":%q},"score":%v}`,
			d.ImageID, d.CategoryID, r.H, r.W, r.String(), d.Score)
		box = fmt.Appendf(box, `{"image_id":%d,"category_id":%d,"bbox":[%v,%v,%v,%v],"score":%v}`,
			d.ImageID, d.CategoryID, d.Bbox[0], d.Bbox[1], d.Bbox[2], d.Bbox[3], d.Score)
	}
	segm, box = append(segm, ']'), append(box, ']')
	for _, c := range []struct {
		name string
		data []byte
		typ  IoUType
	}{{"segm", segm, Segm}, {"bbox", box, BBox}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if _, err := ReadResults(s.ds, bytes.NewReader(c.data), c.typ); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(s.dets))*float64(b.N)/b.Elapsed().Seconds(), "dets/s")
		})
	}
}
