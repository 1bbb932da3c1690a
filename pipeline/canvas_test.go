package pipeline

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/shared"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// TestValidationKeepsEveryInstance: Ultralytics applies the candidate
// rule in training only, so a validation batch keeps an instance with a
// box side ≤ 2 px that a training batch of the same letterbox drops, and
// differs from the batch without that instance by it alone.
func TestValidationKeepsEveryInstance(t *testing.T) {
	rows := synth(t, 1, 0)
	tiny := shard.Instance{AnnID: 77, Class: 3, Polygons: [][]float32{{20, 20, 21.5, 20, 21.5, 21.5, 20, 21.5}}}
	withTiny := slices.Clone(rows)
	withTiny[0].Instances = append(slices.Clone(rows[0].Instances), tiny)

	a := augment.DefaultConfig()
	a.ImgSz = 64
	// Training without randomness that moves pixels: the same letterbox.
	train := a
	train.Mosaic, train.Translate, train.Scale, train.FlipLR, train.HSVH, train.HSVS, train.HSVV = 0, 0, 0, 0, 0, 0, 0
	count := func(src []shard.Image, val bool) (arrow.RecordBatch, []int32) {
		cfg := Config{BatchSize: 1, Workers: 1, Val: val, Augment: a, Start: order.State{Seed: 3}}
		if !val {
			cfg.Augment, cfg.Epochs, cfg.CloseMosaic = train, 1, 1
		}
		r := run(t, &SliceSource{Rows: src}, cfg, 0)
		if len(r.recs) != 1 {
			t.Fatalf("%d batches", len(r.recs))
		}
		c, _, _, _ := labelsOf(t, r.recs)
		return r.recs[0], c
	}
	valTiny, cv := count(withTiny, true)
	defer valTiny.Release()
	trainTiny, ct := count(withTiny, false)
	defer trainTiny.Release()
	valPlain, cp := count(rows, true)
	defer valPlain.Release()
	if !slices.Equal(cv, []int32{1, 2, 3}) {
		t.Fatalf("validation classes %v, want the tiny instance (3) kept", cv)
	}
	if !slices.Equal(ct, []int32{1, 2}) {
		t.Fatalf("training classes %v, want the tiny instance dropped by the candidate rule", ct)
	}
	if !slices.Equal(cp, []int32{1, 2}) {
		t.Fatalf("validation classes without it %v", cp)
	}
	// Everything but the added instance is the batch without it.
	it, _ := batch.ImageTensor(valTiny)
	ip, _ := batch.ImageTensor(valPlain)
	if !slices.Equal(it.Data, ip.Data) {
		t.Fatal("the images differ")
	}
	mt, _ := batch.MaskStack(valTiny)
	mp, _ := batch.MaskStack(valPlain)
	for k := 0; k < 2; k++ {
		if !slices.Equal(mt.At(k), mp.At(k)) {
			t.Fatalf("mask %d differs", k)
		}
	}
	_, _, bt, _ := labelsOf(t, []arrow.RecordBatch{valTiny})
	_, _, bp, _ := labelsOf(t, []arrow.RecordBatch{valPlain})
	if !slices.Equal(bt[:8], bp) {
		t.Fatalf("boxes %v, want %v then the tiny one", bt, bp)
	}
	if w, h := bt[10]-bt[8], bt[11]-bt[9]; w > 2 || h > 2 || w <= 0 {
		t.Fatalf("tiny box %v", bt[8:])
	}
}

// TestRectShapesMatchUltralytics: the loader's rect order and batch
// shapes on coco-tiny's validation image sizes are those of Ultralytics'
// own BaseDataset.set_rectangle (8.4.190), computed by
//
//	ds = SimpleNamespace(ni=80, batch_size=bs, imgsz=imgsz, stride=32, pad=0.5,
//	    labels=[{"shape": (h, w)} ...], im_files=[...]); BaseDataset.set_rectangle(ds)
//	ds.batch_shapes
func TestRectShapesMatchUltralytics(t *testing.T) {
	f, err := os.ReadFile(shared.Path(t, "data/coco-tiny/annotations/instances_val2017.json"))
	if err != nil {
		t.Fatal(err)
	}
	var coco struct {
		Images []struct{ Width, Height int32 } `json:"images"`
	}
	if err := json.Unmarshal(f, &coco); err != nil {
		t.Fatal(err)
	}
	rows := make([]shard.Image, len(coco.Images))
	for i, im := range coco.Images {
		rows[i] = shard.Image{ImageID: int64(i), Width: im.Width, Height: im.Height}
	}
	for _, tc := range []struct {
		batch, imgsz int
		want         [][2]int // Ultralytics' batch_shapes, (h, w)
	}{
		{16, 640, [][2]int{{448, 672}, {480, 672}, {512, 672}, {640, 672}, {672, 512}}},
		{7, 320, [][2]int{{256, 352}, {256, 352}, {256, 352}, {256, 352}, {256, 352}, {256, 352}, {256, 352}, {256, 352}, {288, 352}, {352, 352}, {352, 256}, {352, 256}}},
	} {
		src := &SliceSource{Rows: rows, BlockSize: 9}
		keys, err := aspectRatios(context.Background(), src, len(rows))
		if err != nil {
			t.Fatal(err)
		}
		a := augment.DefaultConfig()
		a.ImgSz = tc.imgsz
		cfg := Config{BatchSize: tc.batch, Val: true, Rect: true, Augment: a}
		l := &Loader{cfg: cfg.defaults(), rectKeys: keys, canvas: cfg.CanvasSide(), blockRows: src.BlockRows()}
		ep, err := l.epochOrder(0)
		if err != nil {
			t.Fatal(err)
		}
		var got [][2]int
		prev := 0.0
		for p := int64(0); p < ep.N; p += int64(tc.batch) {
			j := &job{n: int(min(int64(tc.batch), ep.N-p))}
			l.shapeJob(j, ep, p, 1)
			got = append(got, [2]int{j.liveH, j.liveW})
			if j.liveH > l.canvas || j.liveW > l.canvas {
				t.Fatalf("shape %dx%d outside the canvas %d", j.liveH, j.liveW, l.canvas)
			}
			for i := p; i < p+int64(j.n); i++ {
				if ar := keys[ep.Row(i)]; ar < prev {
					t.Fatalf("position %d: aspect ratio %v after %v: not sorted", i, ar, prev)
				} else {
					prev = ar
				}
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("batch %d imgsz %d: shapes %v, Ultralytics' %v", tc.batch, tc.imgsz, got, tc.want)
		}
	}
}

// liveRegionHolds checks a record of a canvas stream: each row's image
// and boxes lie in the live canvas, the rest of the image is fill and
// the rest of each mask is 0; it returns the live (h, w).
func liveRegionHolds(t *testing.T, rec arrow.RecordBatch, fill uint8) (int, int) {
	t.Helper()
	h, w, ok, err := batch.LiveCanvas(rec)
	if err != nil || !ok {
		t.Fatalf("live canvas: %v (column present: %v)", err, ok)
	}
	it, _ := batch.ImageTensor(rec)
	ms, _ := batch.MaskStack(rec)
	side := it.Shape[1]
	stride := side / ms.Shape[0]
	for i := 0; i < it.Count; i++ {
		im := it.At(i)
		for c := 0; c < 3; c++ {
			for y := 0; y < side; y++ {
				for x := 0; x < side; x++ {
					if (y >= h || x >= w) && im[(c*side+y)*side+x] != fill {
						t.Fatalf("image %d: pixel (%d,%d,%d) outside the live %dx%d is %d, not fill", i, c, y, x, h, w, im[(c*side+y)*side+x])
					}
				}
			}
		}
	}
	for k := 0; k < ms.Count; k++ {
		m := ms.At(k)
		for y := 0; y < ms.Shape[0]; y++ {
			for x := 0; x < ms.Shape[1]; x++ {
				if (y >= h/stride || x >= w/stride) && m[y*ms.Shape[1]+x] != 0 {
					t.Fatalf("mask %d: cell (%d,%d) outside the live grid is on", k, y, x)
				}
			}
		}
	}
	_, _, boxes, _ := labelsOf(t, []arrow.RecordBatch{rec})
	for k := 0; k+3 < len(boxes); k += 4 {
		if boxes[k] < 0 || boxes[k+1] < 0 || boxes[k+2] > float32(w) || boxes[k+3] > float32(h) {
			t.Fatalf("box %v outside the live %dx%d", boxes[k:k+4], h, w)
		}
	}
	return h, w
}

// TestRectBatchesHoldTheirImages: a rect validation stream letterboxes
// each image whole, centred and unscaled beyond load_image's resize, into
// its batch's shape at the canvas' top left, in order of aspect ratio.
func TestRectBatchesHoldTheirImages(t *testing.T) {
	rows := synth(t, 10, 3)
	byID := map[int64]*shard.Image{}
	for i := range rows {
		byID[rows[i].ImageID] = &rows[i]
	}
	a := augment.DefaultConfig()
	a.ImgSz = 64
	cfg := Config{BatchSize: 3, Workers: 2, Val: true, Rect: true, Augment: a}
	r := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, 0)
	defer r.release()
	prev := 0.0
	for _, rec := range r.recs {
		h, w := liveRegionHolds(t, rec, a.Fill)
		imgs, err := batch.ImagesOf(rec)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, im := range imgs {
			ar := float64(im.OrigH) / float64(im.OrigW)
			if ar < prev {
				t.Fatalf("image %d: aspect ratio %v after %v", im.ID, ar, prev)
			}
			prev, lo, hi = ar, min(lo, ar), max(hi, ar)
			lw, lh := loadSize(im.OrigW, im.OrigH, 64)
			x := im.Transform
			if x[0] != float64(lw)/float64(im.OrigW) || x[4] != float64(lh)/float64(im.OrigH) {
				t.Fatalf("image %d: scale %v, %v: want load_image's %dx%d, no further resize", im.ID, x[0], x[4], lw, lh)
			}
			if x[2] != math.Round(float64(w-lw)/2-0.1) || x[5] != math.Round(float64(h-lh)/2-0.1) {
				t.Fatalf("image %d in %dx%d: offset %v, %v: not centred", im.ID, h, w, x[2], x[5])
			}
			if x[2] < 0 || x[5] < 0 || x[2]+float64(lw) > float64(w) || x[5]+float64(lh) > float64(h) {
				t.Fatalf("image %d (%dx%d) does not fit the live %dx%d", im.ID, lw, lh, h, w)
			}
			if byID[im.ID] == nil {
				t.Fatalf("unknown image %d", im.ID)
			}
		}
		if wh, ww := RectShape(lo, hi, 64); wh != h || ww != w {
			t.Fatalf("batch shape %dx%d, want %dx%d", h, w, wh, ww)
		}
	}
	// Validation keeps every instance, rectangular batches or square.
	cfg.Rect = false
	sq := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, 0)
	defer sq.release()
	if a, b := countInstances(t, r.recs), countInstances(t, sq.recs); a != b || a == 0 {
		t.Fatalf("%d instances in rect batches, %d in square ones", a, b)
	}
}

// TestMultiScaleSizesOnTheGrid: every batch's side is on the 32 px grid
// within Ultralytics' range, more than one side is drawn, the samples
// fill exactly that side at the top left, and the stream is the same at
// 1 and 8 workers.
func TestMultiScaleSizesOnTheGrid(t *testing.T) {
	rows := synth(t, 24, 4)
	cfg := testConfig()
	cfg.Augment.ImgSz = 64
	cfg.MultiScale = 0.5
	cfg.BatchSize = 2
	lo, hi := multiScaleRange(64, 0.5)
	if lo != 32 || hi != 96 || cfg.CanvasSide() != 96 {
		t.Fatalf("range [%d, %d], canvas %d: want [32, 96], 96", lo, hi, cfg.CanvasSide())
	}
	var runs [2]result
	for k, workers := range []int{1, 8} {
		c := cfg
		c.Workers = workers
		runs[k] = run(t, &SliceSource{Rows: rows, BlockSize: 5}, c, 0)
		defer runs[k].release()
	}
	equalRuns(t, runs[0].recs, runs[1].recs)
	sides := map[int]int{}
	for _, rec := range runs[0].recs {
		h, w := liveRegionHolds(t, rec, cfg.Augment.Fill)
		if h != w || h%32 != 0 || h < lo || h > hi {
			t.Fatalf("live %dx%d: want a square side on the 32 grid in [%d, %d]", h, w, lo, hi)
		}
		sides[h]++
	}
	if len(sides) < 2 {
		t.Fatalf("sides drawn %v: want several", sides)
	}
}

// TestMultiScaleSizeDrawsUltralytics' range: the draw's bounds are
// randrange's for the documented settings, every side on the grid.
func TestMultiScaleSizeRange(t *testing.T) {
	for _, tc := range []struct {
		imgsz  int
		m      float64
		lo, hi int
	}{
		{640, 0.5, 320, 960},
		{640, 0.25, 480, 800},
		{64, 0.9, 32, 128},
		{640, 0.1, 576, 704},
	} {
		lo, hi := multiScaleRange(tc.imgsz, tc.m)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("imgsz %d m %v: range [%d, %d], want [%d, %d]", tc.imgsz, tc.m, lo, hi, tc.lo, tc.hi)
		}
		seen := map[int]bool{}
		rng := order.NewRand(1, order.StreamBatch, 0, 0)
		for range 2000 {
			s := MultiScaleSize(rng, tc.imgsz, tc.m)
			if s%32 != 0 || s < lo || s > hi {
				t.Fatalf("imgsz %d m %v: side %d", tc.imgsz, tc.m, s)
			}
			seen[s] = true
		}
		if !seen[lo] || !seen[hi] {
			t.Errorf("imgsz %d m %v: ends not drawn in 2000 draws: %v", tc.imgsz, tc.m, seen)
		}
	}
}

// TestCanvasOffKeepsTheSchema: without rect or multi_scale the stream's
// schema is the square one, with no canvas column.
func TestCanvasOffKeepsTheSchema(t *testing.T) {
	cfg := testConfig()
	b, err := cfg.NewBatchBuilder()
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := batch.NewBuilder(64, 64, 16, 16)
	if !b.Schema().Equal(ref.Schema()) || batch.HasCanvas(b.Schema()) || cfg.CanvasSide() != 64 {
		t.Fatalf("schema %v", b.Schema())
	}
	r := run(t, &SliceSource{Rows: synth(t, 4, 0)}, cfg, 1)
	defer r.release()
	if !r.recs[0].Schema().Equal(ref.Schema()) {
		t.Fatal("records carry another schema")
	}
}

// TestRectAndMultiScaleRefusedWhereUnsupported: each refusal names why.
func TestRectAndMultiScaleRefusedWhereUnsupported(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"rect and multi_scale": func(c *Config) { c.Rect, c.MultiScale = true, 0.5 },
		"multi_scale in val":   func(c *Config) { c.Val, c.MultiScale = true, 0.5 },
		"multi_scale 1":        func(c *Config) { c.MultiScale = 1 },
		"multi_scale NaN":      func(c *Config) { c.MultiScale = math.NaN() },
		"multi_scale imgsz 48": func(c *Config) { c.MultiScale, c.Augment.ImgSz = 0.5, 48 },
	} {
		cfg := testConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestMultiScaleWithPartners: copy-paste (flip mode), mixup and cutmix
// draw their partners and paste at the batch's side: every instance stays
// in the live region, and the batches are the same at 1 and 8 workers.
func TestMultiScaleWithPartners(t *testing.T) {
	for name, mod := range map[string]func(*augment.Config){
		"copy_paste": func(a *augment.Config) { a.CopyPaste = 1 },
		"mixup":      func(a *augment.Config) { a.Mixup = 1 },
		"cutmix":     func(a *augment.Config) { a.Cutmix = 1 },
		"all three":  func(a *augment.Config) { a.CopyPaste, a.Mixup, a.Cutmix = 1, 0.5, 0.5 },
	} {
		cfg := testConfig()
		cfg.MultiScale, cfg.BatchSize = 0.5, 2
		mod(&cfg.Augment)
		var runs [2]result
		for k, workers := range []int{1, 8} {
			c := cfg
			c.Workers = workers
			runs[k] = run(t, &SliceSource{Rows: synth(t, 12, 4), BlockSize: 5}, c, 0)
			defer runs[k].release()
		}
		equalRuns(t, runs[0].recs, runs[1].recs)
		sides := map[int]bool{}
		for _, rec := range runs[0].recs {
			h, _ := liveRegionHolds(t, rec, cfg.Augment.Fill)
			sides[h] = true
		}
		if len(sides) < 2 {
			t.Errorf("%s: sides drawn %v: want several", name, sides)
		}
	}
}

// TestRectTraining: Ultralytics' rect in training. The images come in
// aspect-ratio order every epoch (no shuffle), each batch on
// RectTrainShape of its images (no side past imgsz), everything inside
// that live region; mosaic, mixup and cutmix are off whatever the table
// says (no sample carries another image's instances), copy-paste (flip)
// stays on and pastes within the rectangle; the stream is the same at 1
// and 8 workers.
func TestRectTraining(t *testing.T) {
	rows := synth(t, 10, 3)
	inst := map[int64]int{}
	for i := range rows {
		inst[rows[i].ImageID] = len(rows[i].Instances)
	}
	a := augment.DefaultConfig()
	a.ImgSz = 160
	a.Mixup, a.Cutmix, a.FlipUD = 1, 1, 0.5 // mosaic stays at its default 1
	cfg := Config{BatchSize: 3, Workers: 2, Rect: true, Augment: a, Epochs: 2, Start: order.State{Seed: 5}}
	if s := cfg.CanvasSide(); s != 160 {
		t.Fatalf("canvas %d, want imgsz: training rect shapes are not padded", s)
	}
	r := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, -1)
	defer r.release()
	var order [2][]int64
	rectangles := 0
	for bi, rec := range r.recs {
		h, w := liveRegionHolds(t, rec, a.Fill)
		if h != w {
			rectangles++
		}
		imgs, err := batch.ImagesOf(rec)
		if err != nil {
			t.Fatal(err)
		}
		epoch := 2 * bi / len(r.recs)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, im := range imgs {
			ar := float64(im.OrigH) / float64(im.OrigW)
			lo, hi = min(lo, ar), max(hi, ar)
			order[epoch] = append(order[epoch], im.ID)
		}
		if wh, ww := RectTrainShape(lo, hi, 160); wh != h || ww != w {
			t.Fatalf("batch %d shape %dx%d, want %dx%d", bi, h, w, wh, ww)
		}
		_, per, _, _ := labelsOf(t, []arrow.RecordBatch{rec})
		for i, im := range imgs {
			if n := int(per[i]); n > inst[im.ID] {
				t.Fatalf("image %d carries %d instances, its row has %d: a mosaic or a mix", im.ID, n, inst[im.ID])
			}
		}
	}
	if rectangles == 0 {
		t.Fatal("no batch with a rectangular shape")
	}
	if !slices.Equal(order[0], order[1]) {
		t.Fatalf("epoch orders differ: %v and %v", order[0], order[1])
	}
	for i := 1; i < len(order[0]); i++ {
		if arOf(rows, order[0][i]) < arOf(rows, order[0][i-1]) {
			t.Fatalf("images out of aspect-ratio order: %v", order[0])
		}
	}
	// One small square left of each image's centre: its mirror is clear
	// of it, so flip-mode copy-paste doubles every sample's instances.
	left := slices.Clone(rows)
	for i := range left {
		w, h := float32(left[i].Width), float32(left[i].Height)
		x0, y0, x1, y1 := 0.1*w, 0.4*h, 0.3*w, 0.6*h
		left[i].Instances = []shard.Instance{{AnnID: int64(i), Class: 1, Polygons: [][]float32{{x0, y0, x1, y0, x1, y1, x0, y1}}}}
	}
	paste := cfg
	for _, p := range []float64{0, 1} {
		paste.Augment.CopyPaste = p
		pr := run(t, &SliceSource{Rows: left, BlockSize: 4}, paste, -1)
		for _, rec := range pr.recs {
			liveRegionHolds(t, rec, a.Fill)
		}
		if got, want := countInstances(t, pr.recs), len(left)*2*int(1+p); got != want {
			t.Errorf("copy_paste %v: %d instances in two epochs, want %d", p, got, want)
		}
		pr.release()
	}
	cfg.Workers = 1
	one := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, -1)
	defer one.release()
	cfg.Workers = 8
	eight := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, -1)
	defer eight.release()
	equalRuns(t, one.recs, eight.recs)
}

func arOf(rows []shard.Image, id int64) float64 {
	for i := range rows {
		if rows[i].ImageID == id {
			return float64(rows[i].Height) / float64(rows[i].Width) // as aspectRatios reads it
		}
	}
	return math.NaN()
}

func countInstances(t *testing.T, recs []arrow.RecordBatch) int {
	t.Helper()
	c, _, _, _ := labelsOf(t, recs)
	return len(c)
}

// TestRectTrainingShufflesWhenEveryShapeIsOne: Ultralytics turns its
// shuffle off for rect training only when the batch shapes differ; at
// imgsz 64 every batch of these images is 64×64, so the epochs are
// shuffled (two epochs in two orders) and every batch has that shape.
func TestRectTrainingShufflesWhenEveryShapeIsOne(t *testing.T) {
	rows := synth(t, 12, 0)
	a := augment.DefaultConfig()
	a.ImgSz = 64
	cfg := Config{BatchSize: 3, Workers: 2, Rect: true, Augment: a, Epochs: 2, Start: order.State{Seed: 5}}
	r := run(t, &SliceSource{Rows: rows, BlockSize: 4}, cfg, -1)
	defer r.release()
	var ids [2][]int64
	for bi, rec := range r.recs {
		if h, w := liveRegionHolds(t, rec, a.Fill); h != 64 || w != 64 {
			t.Fatalf("batch %d shape %dx%d, want the one shape 64x64", bi, h, w)
		}
		_, _, _, id := labelsOf(t, []arrow.RecordBatch{rec})
		ids[2*bi/len(r.recs)] = append(ids[2*bi/len(r.recs)], id...)
	}
	if slices.Equal(ids[0], ids[1]) {
		t.Fatalf("both epochs in the order %v: not shuffled", ids[0])
	}
}
