package metrics

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/formats/rle"
)

// GridConfig configures an EpochMetric. The zero value is usable.
type GridConfig struct {
	// Stride is the number of canvas pixels per grid cell along each axis
	// (default 4, the prototype grid).
	Stride int
	// MaskThreshold binarises mask probabilities: p > MaskThreshold is
	// foreground (default 0.5).
	MaskThreshold float32
}

// GridTruth is the ground truth of one image as the loader delivers it.
type GridTruth struct {
	// Boxes holds x1, y1, x2, y2 per instance in canvas pixels (len 4·N).
	Boxes []float32
	// Classes holds the category of each instance (len N).
	Classes []int32
	// Masks holds N {0,1} masks of Hp·Wp bytes each, row-major on the grid.
	Masks []uint8
	// IsCrowd marks crowd instances (nil: none). A crowd ground truth is
	// ignored and may absorb any number of detections.
	IsCrowd []bool
	// Areas optionally gives each instance's area in original-image pixels
	// (e.g. the COCO annotation's area field); nil derives it from the grid
	// mask as described on EpochMetric.
	Areas []float64
}

// GridPredictions are one image's detections on the same canvas and grid.
type GridPredictions struct {
	Boxes   []float32 // x1, y1, x2, y2 per detection, canvas pixels (len 4·M)
	Classes []int32   // len M
	Scores  []float32 // len M
	// At most one of MaskProbs (M·Hp·Wp probabilities, thresholded) and
	// MaskBytes (M·Hp·Wp, non-zero is foreground) may be set. An image with
	// detections but neither adds to box mAP only, and the epoch's mask
	// result is then nil rather than silently partial.
	MaskProbs []float32
	MaskBytes []uint8
}

// GridImage is one validation image.
type GridImage struct {
	// Affine maps original-image pixels to canvas pixels: the batch
	// row's transform (batch.View.Transform), [a b c; d e f] mapping
	// (x, y) to (a·x + b·y + c, d·x + e·y + f).
	Affine [6]float64
	// GridH and GridW are Hp and Wp, the grid's rows and columns.
	GridH, GridW int
	Truth        GridTruth
	Pred         GridPredictions
}

// EpochMetric accumulates COCO box and mask mAP over a validation epoch
// from grid-resolution ground truth and predictions, with the same
// matching and accumulation code as Evaluate.
//
// Mask IoU is computed on the grid (run-length, never dense), box IoU on
// the canvas. Both ratios are what the original-frame IoU would be up to
// the grid's resolution: a letterbox is a uniform scale plus a shift, and
// IoU is invariant under it.
//
// Area ranges (small < 32², large ≥ 96²) are defined in original-image
// pixels, so every area is mapped back before bucketing. The affine from
// original image to canvas scales every area by |det A| = |A0·A4 − A1·A3|
// (for a letterbox with scale s, s²), and one grid cell covers Stride²
// canvas pixels, so a mask of n grid cells has n·Stride²/|det A| original
// pixels and a canvas box of area a has a/|det A|. Taking grid cells as
// pixels instead would shrink areas by Stride²/|det A| (16 at scale 1) and
// silently move medium and large instances into "small".
//
// Images are numbered in the order they are added, which is the order
// score ties are broken in, as COCOeval breaks them by image id.
// EpochMetric is not safe for concurrent use.
type EpochMetric struct {
	cfg       GridConfig
	box, mask *core
	images    int
	maskOK    bool

	// scratch reused across images
	counts  []uint32
	gtRLE   []rle.RLE
	dtRLE   []rle.RLE
	gtArea  []float64
	gtBox   [][4]float64
	dtBox   [][4]float64
	dtBArea []float64
	dtMArea []float64
	byCat   map[int64]*gridCell
	used    []*gridCell
	order   []int
	scores  []float64
	in      imgCat
	mrows   []rle.RLE
	mcols   []rle.RLE
}

type gridCell struct {
	cls      int64
	gts, dts []int
}

// NewEpochMetric returns an empty metric.
func NewEpochMetric(cfg GridConfig) *EpochMetric {
	if cfg.Stride <= 0 {
		cfg.Stride = 4
	}
	if cfg.MaskThreshold == 0 {
		cfg.MaskThreshold = 0.5
	}
	m := &EpochMetric{cfg: cfg, byCat: map[int64]*gridCell{}}
	m.Reset()
	return m
}

// Reset forgets every image, keeping buffers.
func (m *EpochMetric) Reset() {
	m.box, m.mask, m.images, m.maskOK = newCore(), newCore(), 0, true
}

// Images returns the number of images added since the last Reset.
func (m *EpochMetric) Images() int { return m.images }

// Result accumulates what has been added: box and mask results with
// per-category statistics (categories are the classes seen, ascending).
// mask is nil when some image had no mask predictions.
func (m *EpochMetric) Result() (box, mask *Result) {
	box = m.box.accumulate().result(BBox, nil)
	if m.maskOK {
		mask = m.mask.accumulate().result(Segm, nil)
	}
	return box, mask
}

// Add scores one image. It returns an error, and records nothing, when the
// slices disagree in length, the affine is singular or a value is not
// finite.
func (m *EpochMetric) Add(img *GridImage) error {
	t, p := &img.Truth, &img.Pred
	hp, wp := img.GridH, img.GridW
	cells := hp * wp
	det := math.Abs(affineDet(img.Affine))
	if !(det > 0) || math.IsInf(det, 0) {
		return fmt.Errorf("image %d: affine %v has determinant %v", m.images, img.Affine, det)
	}
	if hp <= 0 || wp <= 0 {
		return fmt.Errorf("image %d: grid %dx%d", m.images, hp, wp)
	}
	n, k := len(t.Classes), len(p.Classes)
	switch {
	case len(t.Boxes) != 4*n:
		return fmt.Errorf("image %d: %d truth box values for %d instances", m.images, len(t.Boxes), n)
	case len(t.Masks) != n*cells:
		return fmt.Errorf("image %d: %d truth mask bytes, want %d×%d×%d", m.images, len(t.Masks), n, hp, wp)
	case t.IsCrowd != nil && len(t.IsCrowd) != n:
		return fmt.Errorf("image %d: %d crowd flags for %d instances", m.images, len(t.IsCrowd), n)
	case t.Areas != nil && len(t.Areas) != n:
		return fmt.Errorf("image %d: %d areas for %d instances", m.images, len(t.Areas), n)
	case len(p.Boxes) != 4*k || len(p.Scores) != k:
		return fmt.Errorf("image %d: %d prediction box values and %d scores for %d detections", m.images, len(p.Boxes), len(p.Scores), k)
	case p.MaskProbs != nil && p.MaskBytes != nil:
		return fmt.Errorf("image %d: both MaskProbs and MaskBytes set", m.images)
	case p.MaskProbs != nil && len(p.MaskProbs) != k*cells, p.MaskBytes != nil && len(p.MaskBytes) != k*cells:
		return fmt.Errorf("image %d: prediction masks are not %d×%d×%d", m.images, k, hp, wp)
	}
	for i, s := range p.Scores {
		if f := float64(s); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("image %d: detection %d: score %v", m.images, i, s)
		}
	}
	for i, v := range t.Boxes {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("image %d: truth box value %d is %v", m.images, i, v)
		}
	}
	for i, v := range p.Boxes {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("image %d: prediction box value %d is %v", m.images, i, v)
		}
	}
	hasMasks := p.MaskProbs != nil || p.MaskBytes != nil || k == 0
	if !hasMasks {
		m.maskOK = false
	}
	// scale converts grid cells to original-image pixels (see the type doc).
	scale := float64(m.cfg.Stride*m.cfg.Stride) / det

	m.counts = m.counts[:0]
	m.gtRLE, m.gtArea, m.gtBox = m.gtRLE[:0], m.gtArea[:0], m.gtBox[:0]
	for i := 0; i < n; i++ {
		r := m.encode(t.Masks[i*cells:(i+1)*cells], nil, hp, wp)
		m.gtRLE = append(m.gtRLE, r)
		a := float64(r.Area()) * scale
		if t.Areas != nil {
			a = t.Areas[i]
		}
		m.gtArea = append(m.gtArea, a)
		m.gtBox = append(m.gtBox, xywh(t.Boxes[4*i:]))
	}
	m.dtRLE, m.dtBox, m.dtBArea, m.dtMArea = m.dtRLE[:0], m.dtBox[:0], m.dtBArea[:0], m.dtMArea[:0]
	for i := 0; i < k; i++ {
		b := xywh(p.Boxes[4*i:])
		m.dtBox = append(m.dtBox, b)
		m.dtBArea = append(m.dtBArea, float64(b[2]*b[3])/det)
		if hasMasks && k > 0 {
			var r rle.RLE
			if p.MaskProbs != nil {
				r = m.encode(nil, p.MaskProbs[i*cells:(i+1)*cells], hp, wp)
			} else {
				r = m.encode(p.MaskBytes[i*cells:(i+1)*cells], nil, hp, wp)
			}
			m.dtRLE = append(m.dtRLE, r)
			m.dtMArea = append(m.dtMArea, float64(r.Area())*scale)
		}
	}

	// Group by class, keeping instance order within a class: the stable
	// score sort breaks ties by that order, as COCOeval does by file order.
	used := m.used[:0]
	cellOf := func(cls int32) *gridCell {
		c, ok := m.byCat[int64(cls)]
		if !ok {
			c = &gridCell{cls: int64(cls)}
			m.byCat[int64(cls)] = c
		}
		if len(c.gts) == 0 && len(c.dts) == 0 {
			used = append(used, c)
		}
		return c
	}
	for i, cls := range t.Classes {
		c := cellOf(cls)
		c.gts = append(c.gts, i)
	}
	for i, cls := range p.Classes {
		c := cellOf(cls)
		c.dts = append(c.dts, i)
	}
	for _, c := range used {
		m.cell(c, t, p, hasMasks)
	}
	for _, c := range used {
		c.gts, c.dts = c.gts[:0], c.dts[:0]
	}
	m.used = used
	m.images++
	return nil
}

// affineDet returns a·e − b·d, the factor by which the affine scales
// areas, with each product rounded on its own as geom.Affine.Det rounds
// them (no fused multiply-add), so areas are the loader's to the bit.
func affineDet(a [6]float64) float64 { return float64(a[0]*a[4]) - float64(a[1]*a[3]) }

func xywh(b []float32) [4]float64 {
	x1, y1, x2, y2 := float64(b[0]), float64(b[1]), float64(b[2]), float64(b[3])
	return [4]float64{x1, y1, x2 - x1, y2 - y1}
}

// cell scores one (image, class) for boxes and masks.
func (m *EpochMetric) cell(c *gridCell, t *GridTruth, p *GridPredictions, hasMasks bool) {
	in := &m.in
	in.gtArea, in.gtCrowd, in.gtID = in.gtArea[:0], in.gtCrowd[:0], in.gtID[:0]
	for _, g := range c.gts {
		in.gtArea = append(in.gtArea, m.gtArea[g])
		in.gtCrowd = append(in.gtCrowd, t.IsCrowd != nil && t.IsCrowd[g])
		in.gtID = append(in.gtID, int64(g)+1) // any non-zero id
	}
	m.scores = m.scores[:0]
	for _, d := range c.dts {
		m.scores = append(m.scores, float64(p.Scores[d]))
	}
	m.order = scoreOrder(m.order, m.scores, MaxDets[numMaxDet-1])
	G, D := len(c.gts), len(m.order)
	in.dtScore = in.dtScore[:0]
	for _, o := range m.order {
		in.dtScore = append(in.dtScore, m.scores[o])
	}
	in.iou = growF(in.iou, G*D)

	in.dtArea = in.dtArea[:0]
	for _, o := range m.order {
		in.dtArea = append(in.dtArea, m.dtBArea[c.dts[o]])
	}
	for d, o := range m.order {
		db := m.dtBox[c.dts[o]]
		for j, g := range c.gts {
			in.iou[d*G+j] = rle.BoxIoU(db, m.gtBox[g], in.gtCrowd[j])
		}
	}
	m.box.add(c.cls, in)

	if !hasMasks {
		return
	}
	in.dtArea = in.dtArea[:0]
	m.mrows = m.mrows[:0]
	for _, o := range m.order {
		in.dtArea = append(in.dtArea, m.dtMArea[c.dts[o]])
		m.mrows = append(m.mrows, m.dtRLE[c.dts[o]])
	}
	m.mcols = m.mcols[:0]
	for _, g := range c.gts {
		m.mcols = append(m.mcols, m.gtRLE[g])
	}
	rle.IoUMatrix(in.iou, m.mrows, m.mcols, in.gtCrowd)
	m.mask.add(c.cls, in)
}

func growF(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// encode run-length encodes a grid mask in row-major order. The runs are
// stored as an RLE of the transposed mask (H = Wp, W = Hp): column-major
// order of the transpose is row-major order of the grid, and IoU and area
// do not depend on which of the two a mask is walked in. Counts live in
// m.counts until the next Add.
func (m *EpochMetric) encode(bytes []uint8, probs []float32, hp, wp int) rle.RLE {
	start := len(m.counts)
	if probs != nil {
		m.counts = appendRunsProbs(m.counts, probs, m.cfg.MaskThreshold)
	} else {
		m.counts = appendRunsBytes(m.counts, bytes)
	}
	return rle.RLE{H: wp, W: hp, Counts: m.counts[start:len(m.counts):len(m.counts)]}
}

// appendRunsProbs appends the runs of p > thr, starting with background.
// This is the per-pixel hot loop of the epoch metric: one compare per cell
// and work only at run boundaries.
func appendRunsProbs(dst []uint32, p []float32, thr float32) []uint32 {
	last, cur := 0, false
	for i, v := range p {
		if (v > thr) != cur {
			dst = append(dst, uint32(i-last))
			last, cur = i, !cur
		}
	}
	return append(dst, uint32(len(p)-last))
}

// appendRunsBytes appends the runs of b != 0, starting with background.
func appendRunsBytes(dst []uint32, b []uint8) []uint32 {
	last, cur := 0, false
	for i, v := range b {
		if (v != 0) != cur {
			dst = append(dst, uint32(i-last))
			last, cur = i, !cur
		}
	}
	return append(dst, uint32(len(b)-last))
}
