package metrics

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/rle"
)

// rect is an axis-aligned instance in original-image pixels.
type rect struct {
	x, y, w, h int
	cls        int32
	crowd      bool
	score      float32
}

// letterbox: a 640×480 original scaled by 0.5 onto a 320×320 canvas with
// 40 px of padding above; stride 4 gives an 80×80 grid on which one cell
// is 8×8 original pixels.
var (
	lbAffine       = [6]float64{0.5, 0, 0, 0, 0.5, 40}
	lbH, lbW       = 480, 640
	lbGrid         = 80
	lbCell         = 8
	lbGridOffsetY  = 10 // 40 canvas px / 4
	lbCanvasPerOrg = 0.5
)

var lbTruth = []rect{
	{x: 8, y: 8, w: 16, h: 16, cls: 1},                  // 256 px: small
	{x: 80, y: 80, w: 48, h: 40, cls: 1},                // 1920: medium (30 grid cells)
	{x: 200, y: 160, w: 128, h: 112, cls: 1},            // 14336: large (224 grid cells)
	{x: 400, y: 296, w: 40, h: 32, cls: 2},              // 1280: medium (20 cells)
	{x: 496, y: 360, w: 96, h: 96, cls: 1, crowd: true}, // crowd region
	{x: 16, y: 400, w: 104, h: 96 - 24, cls: 2},         // 7488: medium (117 cells)
	{x: 560, y: 200, w: 32, h: 32, cls: 2},              // exactly 32²: small and medium
}

var lbPred = []rect{
	{x: 8, y: 8, w: 16, h: 16, cls: 1, score: 0.9},
	{x: 88, y: 80, w: 48, h: 40, cls: 1, score: 0.8},
	{x: 216, y: 168, w: 128, h: 112, cls: 1, score: 0.7},
	{x: 400, y: 304, w: 40, h: 32, cls: 2, score: 0.6},
	{x: 560, y: 16, w: 24, h: 24, cls: 1, score: 0.95},  // false positive, small
	{x: 296, y: 400, w: 64, h: 64, cls: 2, score: 0.85}, // false positive, medium
	{x: 520, y: 384, w: 32, h: 32, cls: 1, score: 0.5},  // inside the crowd
	{x: 24, y: 408, w: 104, h: 72, cls: 2, score: 0.8},  // same score as a class-1 detection
	{x: 560, y: 200, w: 32, h: 32, cls: 2, score: 0.4},
}

func gridMask(r rect) []uint8 {
	m := make([]uint8, lbGrid*lbGrid)
	gx, gy := r.x/lbCell, r.y/lbCell+lbGridOffsetY
	for y := gy; y < gy+r.h/lbCell; y++ {
		for x := gx; x < gx+r.w/lbCell; x++ {
			m[y*lbGrid+x] = 1
		}
	}
	return m
}

func canvasBox(r rect) []float32 {
	x1 := float64(r.x) * lbCanvasPerOrg
	y1 := float64(r.y)*lbCanvasPerOrg + 40
	return []float32{float32(x1), float32(y1), float32(x1 + float64(r.w)*lbCanvasPerOrg), float32(y1 + float64(r.h)*lbCanvasPerOrg)}
}

func letterboxImage(truth, pred []rect) *GridImage {
	img := &GridImage{Affine: lbAffine, GridH: lbGrid, GridW: lbGrid}
	for _, r := range truth {
		img.Truth.Boxes = append(img.Truth.Boxes, canvasBox(r)...)
		img.Truth.Classes = append(img.Truth.Classes, r.cls)
		img.Truth.Masks = append(img.Truth.Masks, gridMask(r)...)
		img.Truth.IsCrowd = append(img.Truth.IsCrowd, r.crowd)
	}
	for _, r := range pred {
		img.Pred.Boxes = append(img.Pred.Boxes, canvasBox(r)...)
		img.Pred.Classes = append(img.Pred.Classes, r.cls)
		img.Pred.Scores = append(img.Pred.Scores, r.score)
		for _, v := range gridMask(r) {
			// probabilities straddling the threshold
			p := float32(0.2)
			if v != 0 {
				p = 0.75
			}
			img.Pred.MaskProbs = append(img.Pred.MaskProbs, p)
		}
	}
	return img
}

func rectPoly(r rect) string {
	x1, y1, x2, y2 := r.x, r.y, r.x+r.w, r.y+r.h
	return fmt.Sprintf("[[%d,%d,%d,%d,%d,%d,%d,%d]]", x1, y1, x2, y1, x2, y2, x1, y2)
}

// fullResolution scores the same instances with Evaluate on the original
// image: polygon masks at full resolution, areas in original pixels.
func fullResolution(t *testing.T, truth, pred []rect) (box, mask *Result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"images":[{"id":1,"height":%d,"width":%d}],"categories":[{"id":1},{"id":2}],"annotations":[`, lbH, lbW)
	for i, r := range truth {
		if i > 0 {
			b.WriteByte(',')
		}
		crowd := 0
		if r.crowd {
			crowd = 1
		}
		fmt.Fprintf(&b, `{"id":%d,"image_id":1,"category_id":%d,"bbox":[%d,%d,%d,%d],"area":%d,"iscrowd":%d,"segmentation":%s}`,
			i+1, r.cls, r.x, r.y, r.w, r.h, r.w*r.h, crowd, rectPoly(r))
	}
	b.WriteString("]}")
	ds, err := ReadDataset(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	b.WriteByte('[')
	for i, r := range pred {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"image_id":1,"category_id":%d,"bbox":[%d,%d,%d,%d],"score":%v,"segmentation":%s}`,
			r.cls, r.x, r.y, r.w, r.h, float64(r.score), rectPoly(r))
	}
	b.WriteByte(']')
	dets, err := ReadResults(ds, strings.NewReader(b.String()), Segm)
	if err != nil {
		t.Fatal(err)
	}
	box, err = Evaluate(ds, dets, BBox)
	if err != nil {
		t.Fatal(err)
	}
	mask, err = Evaluate(ds, dets, Segm)
	if err != nil {
		t.Fatal(err)
	}
	return box, mask
}

func bucket(area float64) string {
	switch {
	case area < 32*32:
		return "small"
	case area < 96*96:
		return "medium"
	}
	return "large"
}

// TestGridAreasMatchFullResolution shows that grid scoring with areas
// mapped back through the affine buckets every instance as full-resolution
// scoring does and gives the same 12 numbers, and that grid-unit areas
// move instances between buckets and change the numbers.
func TestGridAreasMatchFullResolution(t *testing.T) {
	img := letterboxImage(lbTruth, lbPred)
	stride := 4
	det := lbAffine[0] * lbAffine[4]
	moved := 0
	for i, r := range lbTruth {
		full, _ := rle.FromPolygons([][]float64{{float64(r.x), float64(r.y), float64(r.x + r.w), float64(r.y), float64(r.x + r.w), float64(r.y + r.h), float64(r.x), float64(r.y + r.h)}}, lbH, lbW)
		cells := 0
		for _, v := range img.Truth.Masks[i*lbGrid*lbGrid : (i+1)*lbGrid*lbGrid] {
			cells += int(v)
		}
		mapped := float64(cells*stride*stride) / det
		if mapped != float64(full.Area()) || bucket(mapped) != bucket(float64(full.Area())) {
			t.Errorf("instance %d: grid area mapped back %v, full resolution %d", i, mapped, full.Area())
		}
		if bucket(float64(cells)) != bucket(mapped) {
			moved++
		}
	}
	if moved < 3 {
		t.Fatalf("fixture too weak: only %d instances change bucket in grid units", moved)
	}
	t.Logf("%d of %d instances change bucket when grid cells are taken as pixels", moved, len(lbTruth))

	m := NewEpochMetric(GridConfig{})
	if err := m.Add(img); err != nil {
		t.Fatal(err)
	}
	gbox, gmask := m.Result()
	fbox, fmask := fullResolution(t, lbTruth, lbPred)
	for _, pair := range []struct {
		name       string
		grid, full *Result
	}{{"box", gbox, fbox}, {"mask", gmask, fmask}} {
		for i, n := range StatNames {
			if pair.grid.Stats[i] != pair.full.Stats[i] {
				t.Errorf("%s %s: grid %v, full resolution %v", pair.name, n, pair.grid.Stats[i], pair.full.Stats[i])
			}
		}
		for k := range pair.grid.PerCategory {
			if pair.grid.PerCategory[k].Stats != pair.full.PerCategory[k].Stats {
				t.Errorf("%s category %d: grid %v, full %v", pair.name, pair.grid.PerCategory[k].ID, pair.grid.PerCategory[k].Stats, pair.full.PerCategory[k].Stats)
			}
		}
	}
	if fmask.Stats[4] == -1 || fmask.Stats[5] == -1 {
		t.Fatalf("fixture has no medium/large ground truth: %v", fmask.Stats)
	}

	// The mistake: grid cells taken as pixels (identity transform, stride 1).
	wrong := *img
	wrong.Affine = [6]float64{1, 0, 0, 0, 1, 0}
	wm := NewEpochMetric(GridConfig{Stride: 1})
	if err := wm.Add(&wrong); err != nil {
		t.Fatal(err)
	}
	_, wmask := wm.Result()
	if wmask.Stats[5] != -1 {
		t.Errorf("grid-unit areas still have large instances: APl %v", wmask.Stats[5])
	}
	if wmask.Stats[3] == gmask.Stats[3] && wmask.Stats[4] == gmask.Stats[4] {
		t.Errorf("grid-unit areas did not change APs/APm: %v vs %v", wmask.Stats, gmask.Stats)
	}
	if wmask.Stats[0] != gmask.Stats[0] {
		t.Errorf("area-independent AP changed: %v vs %v", wmask.Stats[0], gmask.Stats[0])
	}
}

// TestEpochMetricMatchesEvaluate is a property test: random grid scenes
// (crowds, ties, > 100 detections of one class, empty masks) scored by
// EpochMetric and, as COCO JSON at grid resolution, by Evaluate give equal
// statistics.
func TestEpochMetricMatchesEvaluate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const hp, wp, stride = 24, 20, 8
	// canvas = 8× grid, original = canvas: a cell is 64 pixels, so all
	// three area ranges occur
	affine := [6]float64{1, 0, 0, 0, 1, 0}
	for trial := 0; trial < 16; trial++ {
		m := NewEpochMetric(GridConfig{Stride: stride})
		var gt, dt strings.Builder
		gt.WriteString(`{"categories":[{"id":0},{"id":1},{"id":2}],"images":[`)
		var anns []string
		dt.WriteByte('[')
		ndt := 0
		nimg := 1 + r.IntN(6)
		for im := 0; im < nimg; im++ {
			if im > 0 {
				gt.WriteByte(',')
			}
			fmt.Fprintf(&gt, `{"id":%d,"height":%d,"width":%d}`, im+1, hp, wp)
			img := &GridImage{Affine: affine, GridH: hp, GridW: wp}
			ng := r.IntN(6)
			nd := r.IntN(12)
			if trial == 3 && im == 0 {
				nd = 130
			}
			var gtMasks [][]uint8
			var gtBoxes [][4]float64
			var gtCls []int32
			for g := 0; g < ng; g++ {
				mask, box := randomBlob(r, hp, wp)
				cls := int32(r.IntN(3))
				gtMasks, gtBoxes, gtCls = append(gtMasks, mask), append(gtBoxes, box), append(gtCls, cls)
				crowd := r.IntN(6) == 0
				img.Truth.Boxes = append(img.Truth.Boxes, scaleBox(box, stride)...)
				img.Truth.Classes = append(img.Truth.Classes, cls)
				img.Truth.Masks = append(img.Truth.Masks, mask...)
				img.Truth.IsCrowd = append(img.Truth.IsCrowd, crowd)
				rl, _ := rle.FromMask(mask, hp, wp)
				cw := 0
				if crowd {
					cw = 1
				}
				cnts, _ := json.Marshal(rl.Counts)
				anns = append(anns, fmt.Sprintf(`{"id":%d,"image_id":%d,"category_id":%d,"bbox":[%v,%v,%v,%v],"area":%d,"iscrowd":%d,"segmentation":{"size":[%d,%d],"counts":%s}}`,
					len(anns)+1, im+1, cls, box[0]*stride, box[1]*stride, (box[2]-box[0])*stride, (box[3]-box[1])*stride, rl.Area()*stride*stride, cw, hp, wp, cnts))
			}
			for d := 0; d < nd; d++ {
				mask, box := randomBlob(r, hp, wp)
				cls := int32(r.IntN(3))
				if ng > 0 && r.IntN(3) > 0 {
					// a noisy copy of a ground truth, so matches happen
					g := r.IntN(ng)
					mask, box = slices.Clone(gtMasks[g]), gtBoxes[g]
					for f := r.IntN(8); f > 0; f-- {
						mask[r.IntN(len(mask))] ^= 1
					}
					box[r.IntN(4)] += float64(r.IntN(3) - 1)
					if r.IntN(5) > 0 {
						cls = gtCls[g]
					}
				}
				if trial == 3 && im == 0 {
					cls = 1
				}
				score := float32(r.IntN(5)) / 4 // many ties
				img.Pred.Boxes = append(img.Pred.Boxes, scaleBox(box, stride)...)
				img.Pred.Classes = append(img.Pred.Classes, cls)
				img.Pred.Scores = append(img.Pred.Scores, score)
				img.Pred.MaskBytes = append(img.Pred.MaskBytes, mask...)
				rl, _ := rle.FromMask(mask, hp, wp)
				if ndt > 0 {
					dt.WriteByte(',')
				}
				ndt++
				fmt.Fprintf(&dt, `{"image_id":%d,"category_id":%d,"bbox":[%v,%v,%v,%v],"score":%v,"segmentation":{"size":[%d,%d],"counts":%q}}`,
					im+1, cls, box[0]*stride, box[1]*stride, (box[2]-box[0])*stride, (box[3]-box[1])*stride, score, hp, wp, rl.String())
			}
			if err := m.Add(img); err != nil {
				t.Fatal(err)
			}
		}
		dt.WriteByte(']')
		fmt.Fprintf(&gt, `],"annotations":[%s]}`, strings.Join(anns, ","))
		ds, err := ReadDataset(strings.NewReader(gt.String()))
		if err != nil {
			t.Fatal(err)
		}
		gbox, gmask := m.Result()
		if ndt == 0 {
			continue
		}
		dets, err := ReadResults(ds, strings.NewReader(dt.String()), Segm)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			typ  IoUType
			grid *Result
		}{{BBox, gbox}, {Segm, gmask}} {
			// Box-branch loadRes gives detections the box area in both
			// evaluations; EpochMetric uses the mask area for masks. Align
			// the reference with the grid metric's definition.
			if c.typ == Segm {
				for i := range dets {
					r, err := dets[i].Mask.RLE()
					if err != nil {
						t.Fatal(err)
					}
					dets[i].Area = float64(r.Area() * stride * stride)
				}
			}
			want, err := Evaluate(ds, dets, c.typ)
			if err != nil {
				t.Fatal(err)
			}
			if c.grid.Stats != want.Stats {
				t.Errorf("trial %d %s: grid %v\nwant %v", trial, c.typ, c.grid.Stats, want.Stats)
			}
		}
	}
}

// randomBlob returns a random rectangle-ish mask on the grid (possibly
// empty) and its grid box x1, y1, x2, y2.
func randomBlob(r *rand.Rand, hp, wp int) ([]uint8, [4]float64) {
	m := make([]uint8, hp*wp)
	x0, y0 := r.IntN(wp), r.IntN(hp)
	w, h := r.IntN(wp-x0+1), r.IntN(hp-y0+1)
	for y := y0; y < y0+h; y++ {
		for x := x0; x < x0+w; x++ {
			if r.IntN(10) > 0 {
				m[y*wp+x] = 1
			}
		}
	}
	return m, [4]float64{float64(x0), float64(y0), float64(x0 + w), float64(y0 + h)}
}

func scaleBox(b [4]float64, s float64) []float32 {
	return []float32{float32(b[0] * s), float32(b[1] * s), float32(b[2] * s), float32(b[3] * s)}
}

func TestEpochMetricRejectsBadInput(t *testing.T) {
	good := func() *GridImage { return letterboxImage(lbTruth[:2], lbPred[:2]) }
	tests := []struct {
		name string
		mod  func(*GridImage)
	}{
		{"singular affine", func(g *GridImage) { g.Affine = [6]float64{1, 2, 0, 2, 4, 0} }},
		{"short truth masks", func(g *GridImage) { g.Truth.Masks = g.Truth.Masks[1:] }},
		{"short boxes", func(g *GridImage) { g.Pred.Boxes = g.Pred.Boxes[1:] }},
		{"nan score", func(g *GridImage) { g.Pred.Scores[1] = float32(math.NaN()) }},
		{"both mask forms", func(g *GridImage) { g.Pred.MaskBytes = make([]uint8, len(g.Pred.MaskProbs)) }},
		{"crowd flags", func(g *GridImage) { g.Truth.IsCrowd = g.Truth.IsCrowd[:1] }},
	}
	for _, tc := range tests {
		m := NewEpochMetric(GridConfig{})
		g := good()
		tc.mod(g)
		if err := m.Add(g); err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if m.Images() != 0 {
			t.Errorf("%s: counted a rejected image", tc.name)
		}
	}
	m := NewEpochMetric(GridConfig{})
	if err := m.Add(good()); err != nil || m.Images() != 1 {
		t.Fatalf("good image: %v", err)
	}
}

// TestMaskProbsEqualBytes checks the 0.5 threshold: probabilities and the
// bytes they threshold to score identically.
func TestMaskProbsEqualBytes(t *testing.T) {
	a := letterboxImage(lbTruth, lbPred)
	b := letterboxImage(lbTruth, lbPred)
	b.Pred.MaskBytes = make([]uint8, len(b.Pred.MaskProbs))
	for i, p := range b.Pred.MaskProbs {
		if p > 0.5 {
			b.Pred.MaskBytes[i] = 1
		}
	}
	b.Pred.MaskProbs = nil
	ma, mb := NewEpochMetric(GridConfig{}), NewEpochMetric(GridConfig{})
	if err := ma.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := mb.Add(b); err != nil {
		t.Fatal(err)
	}
	_, ra := ma.Result()
	_, rb := mb.Result()
	if ra.Stats != rb.Stats {
		t.Errorf("probs %v, bytes %v", ra.Stats, rb.Stats)
	}
}
