package metrics

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/segpipe/segpipe/formats/rle"
)

// Evaluate scores dets (from ReadResults) against ds as COCOeval does with
// default parameters: evaluate(), accumulate(), summarize(). Every category
// of ds appears in the result; one without ground truth has -1 entries.
func Evaluate(ds *Dataset, dets []Detection, typ IoUType) (*Result, error) {
	if typ != BBox && typ != Segm {
		return nil, fmt.Errorf("iou type %q: want bbox or segm", typ)
	}
	if typ == Segm {
		if err := ds.buildMasks(); err != nil {
			return nil, err
		}
	} else {
		for i := range ds.Annotations {
			if a := &ds.Annotations[i]; !a.hasBbox {
				return nil, fmt.Errorf("ground truth: annotation %d: no bbox for bbox evaluation", a.ID)
			}
		}
	}
	detsByImage := make([][]int32, len(ds.Images))
	for i := range dets {
		d := &dets[i]
		ii, ok := ds.imgIdx[d.ImageID]
		if !ok {
			return nil, fmt.Errorf("detection %d: image_id %d is not in the ground truth", i, d.ImageID)
		}
		if _, ok := ds.catIdx[d.CategoryID]; !ok {
			return nil, fmt.Errorf("detection %d: category_id %d is not in the ground truth", i, d.CategoryID)
		}
		if typ == Segm && d.Mask == nil {
			return nil, fmt.Errorf("detection %d: no mask for segm evaluation", i)
		}
		detsByImage[ii] = append(detsByImage[ii], int32(i))
	}
	c := newCore()
	for _, cat := range ds.Categories {
		c.category(cat.ID)
	}
	var w cocoWork
	for ii := range ds.Images {
		if err := w.image(c, ds, dets, ds.byImage[ii], detsByImage[ii], typ); err != nil {
			return nil, fmt.Errorf("image %d: %w", ds.Images[ii].ID, err)
		}
	}
	names := make(map[int64]string, len(ds.Categories))
	for _, cat := range ds.Categories {
		names[cat.ID] = cat.Name
	}
	return c.accumulate().result(typ, names), nil
}

// maskIoUMatrix is the mask IoU used by Evaluate; a variable only so the
// benchmark can measure the dense-mask baseline through the same code.
var maskIoUMatrix = rle.IoUMatrix

// cocoWork holds buffers reused across images.
type cocoWork struct {
	gts, dts []int32
	in       imgCat
	scores   []float64
	order    []int
	dtMasks  []rle.RLE
	arena    []uint32
	gtMasks  []rle.RLE
	gtBoxes  [][4]float64
	dtBoxes  [][4]float64
}

func (w *cocoWork) image(c *core, ds *Dataset, dets []Detection, gtIdx, dtIdx []int32, typ IoUType) error {
	// Group by category, keeping file order inside a category (COCO's
	// imgToAnns order), which is what the stable sorts below rely on.
	w.gts = append(w.gts[:0], gtIdx...)
	w.dts = append(w.dts[:0], dtIdx...)
	slices.SortStableFunc(w.gts, func(a, b int32) int {
		return cmp.Compare(ds.Annotations[a].CategoryID, ds.Annotations[b].CategoryID)
	})
	slices.SortStableFunc(w.dts, func(a, b int32) int {
		return cmp.Compare(dets[a].CategoryID, dets[b].CategoryID)
	})
	gi, di := 0, 0
	for gi < len(w.gts) || di < len(w.dts) {
		var cat int64
		switch {
		case gi == len(w.gts):
			cat = dets[w.dts[di]].CategoryID
		case di == len(w.dts):
			cat = ds.Annotations[w.gts[gi]].CategoryID
		default:
			cat = min(ds.Annotations[w.gts[gi]].CategoryID, dets[w.dts[di]].CategoryID)
		}
		g0, d0 := gi, di
		for gi < len(w.gts) && ds.Annotations[w.gts[gi]].CategoryID == cat {
			gi++
		}
		for di < len(w.dts) && dets[w.dts[di]].CategoryID == cat {
			di++
		}
		if err := w.cell(c, ds, dets, cat, w.gts[g0:gi], w.dts[d0:di], typ); err != nil {
			return err
		}
	}
	return nil
}

func (w *cocoWork) cell(c *core, ds *Dataset, dets []Detection, cat int64, gts, dts []int32, typ IoUType) error {
	in := &w.in
	in.gtArea, in.gtCrowd, in.gtID = in.gtArea[:0], in.gtCrowd[:0], in.gtID[:0]
	for _, g := range gts {
		a := &ds.Annotations[g]
		in.gtArea = append(in.gtArea, a.Area)
		in.gtCrowd = append(in.gtCrowd, a.IsCrowd)
		in.gtID = append(in.gtID, a.ID)
	}
	w.scores = w.scores[:0]
	for _, d := range dts {
		w.scores = append(w.scores, dets[d].Score)
	}
	w.order = scoreOrder(w.order, w.scores, MaxDets[numMaxDet-1])
	in.dtScore, in.dtArea = in.dtScore[:0], in.dtArea[:0]
	for _, o := range w.order {
		d := &dets[dts[o]]
		in.dtScore = append(in.dtScore, d.Score)
		in.dtArea = append(in.dtArea, d.Area)
	}
	G, D := len(gts), len(w.order)
	in.iou = slices.Grow(in.iou[:0], G*D)[:G*D]
	switch typ {
	case BBox:
		w.gtBoxes = w.gtBoxes[:0]
		for _, g := range gts {
			w.gtBoxes = append(w.gtBoxes, ds.Annotations[g].Bbox)
		}
		for d, o := range w.order {
			db := dets[dts[o]].Bbox
			for g := range gts {
				in.iou[d*G+g] = rle.BoxIoU(db, w.gtBoxes[g], in.gtCrowd[g])
			}
		}
	case Segm:
		w.gtMasks = w.gtMasks[:0]
		for _, g := range gts {
			w.gtMasks = append(w.gtMasks, ds.masks[g])
		}
		w.dtMasks, w.arena = w.dtMasks[:0], w.arena[:0]
		for _, o := range w.order {
			// Earlier masks keep pointing into the old array when the
			// arena grows; it is only reused once the cell is scored.
			r, arena, err := dets[dts[o]].Mask.appendRLE(w.arena)
			if err != nil {
				return fmt.Errorf("detection %d: %w", dts[o], err)
			}
			w.arena = arena
			w.dtMasks = append(w.dtMasks, r)
		}
		maskIoUMatrix(in.iou, w.dtMasks, w.gtMasks, in.gtCrowd)
	}
	c.add(cat, in)
	return nil
}
