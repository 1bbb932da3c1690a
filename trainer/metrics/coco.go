package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/segpipe/segpipe/formats/rle"
)

// Image is a ground-truth image: its id and size in pixels.
type Image struct {
	ID     int64
	Height int
	Width  int
}

// Category is a ground-truth category.
type Category struct {
	ID   int64
	Name string
}

// Annotation is a ground-truth instance. Area is the annotation's "area"
// field, which COCOeval uses for area ranges (not the mask pixel count).
type Annotation struct {
	ID         int64
	ImageID    int64
	CategoryID int64
	Bbox       [4]float64
	Area       float64
	IsCrowd    bool
	// Segmentation is the raw JSON; Evaluate rasterises it (as
	// COCO.annToRLE does) only for segm evaluation, so box evaluation works
	// on files whose masks pycocotools could not read either.
	Segmentation json.RawMessage

	hasBbox bool
}

// Dataset is COCO ground truth loaded for evaluation.
type Dataset struct {
	Images      []Image // ascending id
	Categories  []Category
	Annotations []Annotation // file order

	imgIdx  map[int64]int
	catIdx  map[int64]int
	byImage [][]int32 // annotation indices per image, file order

	masks []rle.RLE // per annotation, built on first segm evaluation
}

// buildMasks rasterises every annotation's segmentation once.
func (ds *Dataset) buildMasks() error {
	if ds.masks != nil {
		return nil
	}
	masks := make([]rle.RLE, len(ds.Annotations))
	for i := range ds.Annotations {
		a := &ds.Annotations[i]
		im := ds.Images[ds.imgIdx[a.ImageID]]
		if !hasJSON(a.Segmentation) {
			return fmt.Errorf("ground truth: annotation %d: no segmentation for segm evaluation", a.ID)
		}
		m, err := parseSegmentation(a.Segmentation, im.Height, im.Width)
		if err != nil {
			return fmt.Errorf("ground truth: annotation %d: segmentation: %w", a.ID, err)
		}
		masks[i] = m
	}
	ds.masks = masks
	return nil
}

func hasJSON(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// ReadDatasetFile loads a COCO instances JSON file.
func ReadDatasetFile(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ds, err := ReadDataset(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ds, nil
}

type jsonImage struct {
	ID     int64 `json:"id"`
	Height int   `json:"height"`
	Width  int   `json:"width"`
}

type jsonCategory struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

type jsonAnnotation struct {
	ID           int64           `json:"id"`
	ImageID      int64           `json:"image_id"`
	CategoryID   int64           `json:"category_id"`
	Bbox         []float64       `json:"bbox"`
	Area         *float64        `json:"area"`
	IsCrowd      int             `json:"iscrowd"`
	Segmentation json.RawMessage `json:"segmentation"`
}

// ReadDataset loads COCO instances JSON (images, categories, annotations)
// and rasterises every segmentation once.
func ReadDataset(r io.Reader) (*Dataset, error) {
	var raw struct {
		Images      []jsonImage      `json:"images"`
		Categories  []jsonCategory   `json:"categories"`
		Annotations []jsonAnnotation `json:"annotations"`
	}
	if err := json.NewDecoder(r).Decode(&raw); err != nil {
		return nil, fmt.Errorf("ground truth: %w", err)
	}
	ds := &Dataset{imgIdx: map[int64]int{}, catIdx: map[int64]int{}}
	for i, im := range raw.Images {
		if _, dup := ds.imgIdx[im.ID]; dup {
			return nil, fmt.Errorf("ground truth: images[%d]: duplicate image id %d", i, im.ID)
		}
		if im.Height <= 0 || im.Width <= 0 {
			return nil, fmt.Errorf("ground truth: image %d: size %dx%d", im.ID, im.Width, im.Height)
		}
		ds.imgIdx[im.ID] = -1
		ds.Images = append(ds.Images, Image{ID: im.ID, Height: im.Height, Width: im.Width})
	}
	slices.SortFunc(ds.Images, func(a, b Image) int { return cmpInt64(a.ID, b.ID) })
	for i, im := range ds.Images {
		ds.imgIdx[im.ID] = i
	}
	for i, c := range raw.Categories {
		if _, dup := ds.catIdx[c.ID]; dup {
			return nil, fmt.Errorf("ground truth: categories[%d]: duplicate category id %d", i, c.ID)
		}
		ds.catIdx[c.ID] = -1
		ds.Categories = append(ds.Categories, Category{ID: c.ID, Name: c.Name})
	}
	slices.SortFunc(ds.Categories, func(a, b Category) int { return cmpInt64(a.ID, b.ID) })
	for i, c := range ds.Categories {
		ds.catIdx[c.ID] = i
	}
	ds.byImage = make([][]int32, len(ds.Images))
	ds.Annotations = make([]Annotation, 0, len(raw.Annotations))
	for i, ja := range raw.Annotations {
		ii, ok := ds.imgIdx[ja.ImageID]
		if !ok {
			return nil, fmt.Errorf("ground truth: annotation %d (index %d): unknown image id %d", ja.ID, i, ja.ImageID)
		}
		if _, ok := ds.catIdx[ja.CategoryID]; !ok {
			return nil, fmt.Errorf("ground truth: annotation %d (index %d): unknown category id %d", ja.ID, i, ja.CategoryID)
		}
		if ja.Area == nil {
			// COCOeval buckets by this field and fails without it.
			return nil, fmt.Errorf("ground truth: annotation %d (index %d): no area", ja.ID, i)
		}
		a := Annotation{ID: ja.ID, ImageID: ja.ImageID, CategoryID: ja.CategoryID, Area: *ja.Area, IsCrowd: ja.IsCrowd != 0}
		switch {
		case len(ja.Bbox) == 4:
			copy(a.Bbox[:], ja.Bbox)
			a.hasBbox = true
		case ja.Bbox != nil:
			return nil, fmt.Errorf("ground truth: annotation %d: bbox has %d numbers, want 4", ja.ID, len(ja.Bbox))
		}
		a.Segmentation = ja.Segmentation
		ds.byImage[ii] = append(ds.byImage[ii], int32(len(ds.Annotations)))
		ds.Annotations = append(ds.Annotations, a)
	}
	return ds, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseSegmentation follows COCO.annToRLE: a list is polygons (rasterised
// and merged at the image size), an object with list counts is an
// uncompressed RLE and one with string counts a compressed RLE; both RLE
// forms keep their own size.
func parseSegmentation(raw json.RawMessage, h, w int) (rle.RLE, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return rle.RLE{}, errors.New("empty")
	}
	switch raw[0] {
	case '[':
		var polys [][]float64
		if err := json.Unmarshal(raw, &polys); err != nil {
			return rle.RLE{}, fmt.Errorf("polygons: %w", err)
		}
		if len(polys) > 0 && len(polys[0]) == 4 {
			// frPyObjects would take the box branch here and fail on a
			// Python list; refuse rather than guess.
			return rle.RLE{}, errors.New("first polygon has exactly 4 numbers, which pycocotools reads as a box")
		}
		return rle.FromPolygons(polys, h, w)
	case '{':
		var obj struct {
			Size   []int           `json:"size"`
			Counts json.RawMessage `json:"counts"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return rle.RLE{}, fmt.Errorf("RLE: %w", err)
		}
		if len(obj.Size) != 2 {
			return rle.RLE{}, fmt.Errorf("RLE size %v, want [height, width]", obj.Size)
		}
		r := rle.RLE{H: obj.Size[0], W: obj.Size[1]}
		c := bytes.TrimSpace(obj.Counts)
		switch {
		case len(c) > 0 && c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return rle.RLE{}, fmt.Errorf("RLE counts: %w", err)
			}
			cnts, err := rle.Decode(s)
			if err != nil {
				return rle.RLE{}, err
			}
			r.Counts = cnts
		case len(c) > 0 && c[0] == '[':
			if err := json.Unmarshal(c, &r.Counts); err != nil {
				return rle.RLE{}, fmt.Errorf("%w: counts: %v", rle.ErrMalformed, err)
			}
		default:
			return rle.RLE{}, fmt.Errorf("%w: counts must be a string or a list", rle.ErrMalformed)
		}
		if err := r.Validate(); err != nil {
			return rle.RLE{}, err
		}
		return r, nil
	}
	return rle.RLE{}, fmt.Errorf("want a polygon list or an RLE object, got %.20q", raw)
}

// Mask is a detection's segmentation. A compressed RLE string from a
// results file is kept as the string and decoded when scored: at COCO
// scale (5,000 images × 100 masks) the strings take about a quarter of the
// memory of decoded counts.
type Mask struct {
	H, W       int
	compressed string
	counts     []uint32
}

// NewMask wraps decoded runs.
func NewMask(r rle.RLE) *Mask { return &Mask{H: r.H, W: r.W, counts: r.Counts} }

// RLE returns the decoded mask; compressed masks are decoded into a new
// slice on every call.
func (m *Mask) RLE() (rle.RLE, error) {
	r, _, err := m.appendRLE(nil)
	return r, err
}

// appendRLE decodes a compressed mask by appending to dst (the
// evaluator's per-cell arena) and returns the mask and the grown dst.
func (m *Mask) appendRLE(dst []uint32) (rle.RLE, []uint32, error) {
	if m.counts != nil || m.compressed == "" {
		return rle.RLE{H: m.H, W: m.W, Counts: m.counts}, dst, nil
	}
	start := len(dst)
	dst, err := rle.AppendDecode(dst, m.compressed)
	if err != nil {
		return rle.RLE{}, dst, err
	}
	return rle.RLE{H: m.H, W: m.W, Counts: dst[start:len(dst):len(dst)]}, dst, nil
}

// Detection is one result after COCO.loadRes: ids are 1..N in file order,
// Area and Bbox follow loadRes' branch rule (see LoadResults).
type Detection struct {
	ID         int64
	ImageID    int64
	CategoryID int64
	Score      float64
	Bbox       [4]float64
	Area       float64
	// Mask is the segmentation (nil when evaluating boxes only and the
	// result carried none).
	Mask *Mask
	// MaskFromBox reports that the result had no segmentation and Mask is
	// its box's polygon (loadRes' box branch).
	MaskFromBox bool
}

type jsonResult struct {
	ImageID      *int64    `json:"image_id"`
	CategoryID   *int64    `json:"category_id"`
	Bbox         []float64 `json:"bbox"`
	Score        *float64  `json:"score"`
	Segmentation jsonSeg   `json:"segmentation"`
}

// jsonSeg parses a result's segmentation in one pass: polygons, or an RLE
// whose counts are a compressed string or an uncompressed list.
type jsonSeg struct {
	present  bool
	polygons [][]float64
	isRLE    bool
	size     []int
	str      string
	list     []uint32
	isString bool
}

func (j *jsonSeg) UnmarshalJSON(b []byte) error {
	*j = jsonSeg{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil
	}
	j.present = true
	switch b[0] {
	case '[':
		return json.Unmarshal(b, &j.polygons)
	case '{':
		var obj struct {
			Size   []int      `json:"size"`
			Counts jsonCounts `json:"counts"`
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return err
		}
		j.isRLE, j.size = true, obj.Size
		j.str, j.list, j.isString = obj.Counts.str, obj.Counts.list, obj.Counts.isString
		if !obj.Counts.present {
			return fmt.Errorf("%w: RLE without counts", rle.ErrMalformed)
		}
		return nil
	}
	return fmt.Errorf("segmentation must be a polygon list or an RLE object, got %.20q", b)
}

type jsonCounts struct {
	present  bool
	isString bool
	str      string
	list     []uint32
}

func (c *jsonCounts) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil
	}
	c.present = true
	if b[0] == '"' {
		c.isString = true
		if bytes.IndexByte(b[1:len(b)-1], '\\') < 0 {
			c.str = string(b[1 : len(b)-1]) // no escapes: skip the decoder
			return nil
		}
		return json.Unmarshal(b, &c.str)
	}
	if err := json.Unmarshal(b, &c.list); err != nil {
		return fmt.Errorf("%w: counts: %v", rle.ErrMalformed, err)
	}
	return nil
}

// mask builds the detection's mask at image size h×w; scratch receives
// the decoded runs of a compressed string (for area and box), which the
// returned Mask does not keep.
func (j *jsonSeg) mask(h, w int, scratch []uint32) (*Mask, rle.RLE, []uint32, error) {
	if !j.isRLE {
		if len(j.polygons) > 0 && len(j.polygons[0]) == 4 {
			return nil, rle.RLE{}, scratch, errors.New("first polygon has exactly 4 numbers, which pycocotools reads as a box")
		}
		r, err := rle.FromPolygons(j.polygons, h, w)
		if err != nil {
			return nil, r, scratch, err
		}
		return NewMask(r), r, scratch, nil
	}
	if len(j.size) != 2 {
		return nil, rle.RLE{}, scratch, fmt.Errorf("%w: size %v, want [height, width]", rle.ErrMalformed, j.size)
	}
	r := rle.RLE{H: j.size[0], W: j.size[1]}
	if j.isString {
		var err error
		scratch, err = rle.AppendDecode(scratch[:0], j.str)
		if err != nil {
			return nil, r, scratch, err
		}
		r.Counts = scratch
	} else {
		r.Counts = j.list
	}
	if err := r.Validate(); err != nil {
		return nil, r, scratch, err
	}
	if j.isString {
		return &Mask{H: r.H, W: r.W, compressed: j.str}, r, scratch, nil
	}
	return NewMask(r), r, scratch, nil
}

// ErrBadResults is wrapped by every error about a results file's content.
var ErrBadResults = errors.New("bad detection results")

// ReadResultsFile is ReadResults on a file.
func ReadResultsFile(ds *Dataset, path string, typ IoUType) ([]Detection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dets, err := ReadResults(ds, bufio.NewReaderSize(f, 1<<20), typ)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return dets, nil
}

// ReadResults reads a COCO results list and applies COCO.loadRes:
//
//   - If the first result has a non-empty "bbox", every result takes the
//     box branch: Area = w·h of the box (unclipped, may be 0), even for segm
//     evaluation; a result without "segmentation" gets the box's polygon.
//   - Otherwise every result needs "segmentation": Area = mask pixel count,
//     Bbox = the mask's bounding box (rleToBbox).
//   - Ids are 1..N in file order; every image_id must exist in ds.
//
// Stricter than pycocotools (it would crash or silently drop these):
// unknown category ids, missing scores, masks whose size differs from the
// image, malformed RLE and non-JSON numbers such as NaN are errors naming
// the detection's index. Masks are only decoded when typ is Segm.
func ReadResults(ds *Dataset, r io.Reader, typ IoUType) ([]Detection, error) {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResults, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("%w: want a JSON list of results, got %v", ErrBadResults, tok)
	}
	var dets []Detection
	var scratch []uint32
	boxBranch := false
	for i := 0; dec.More(); i++ {
		var jr jsonResult
		if err := dec.Decode(&jr); err != nil {
			hint := ""
			if se := err.Error(); strings.Contains(se, "invalid character 'N'") || strings.Contains(se, "invalid character 'I'") || strings.Contains(se, "invalid character '-' in numeric") {
				hint = " (NaN and Infinity are not JSON numbers: fix the score or box at its source)"
			}
			return nil, fmt.Errorf("%w: detection %d (byte %d): %v%s", ErrBadResults, i, dec.InputOffset(), err, hint)
		}
		if i == 0 {
			boxBranch = len(jr.Bbox) > 0
		}
		d, err := ds.loadResult(i, &jr, boxBranch, typ, &scratch)
		if err != nil {
			return nil, fmt.Errorf("%w: detection %d: %v", ErrBadResults, i, err)
		}
		dets = append(dets, d)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: after detection %d: %v", ErrBadResults, len(dets), err)
	}
	return dets, nil
}

func (ds *Dataset) loadResult(i int, jr *jsonResult, boxBranch bool, typ IoUType, scratch *[]uint32) (Detection, error) {
	if jr.ImageID == nil {
		return Detection{}, errors.New("no image_id")
	}
	if jr.CategoryID == nil {
		return Detection{}, errors.New("no category_id")
	}
	if jr.Score == nil {
		return Detection{}, errors.New("no score")
	}
	d := Detection{ID: int64(i) + 1, ImageID: *jr.ImageID, CategoryID: *jr.CategoryID, Score: *jr.Score}
	ii, ok := ds.imgIdx[d.ImageID]
	if !ok {
		return d, fmt.Errorf("image_id %d is not in the ground truth", d.ImageID)
	}
	if _, ok := ds.catIdx[d.CategoryID]; !ok {
		return d, fmt.Errorf("category_id %d is not in the ground truth", d.CategoryID)
	}
	if math.IsNaN(d.Score) || math.IsInf(d.Score, 0) {
		return d, fmt.Errorf("score %v is not finite", d.Score)
	}
	im := ds.Images[ii]
	seg := &jr.Segmentation
	if boxBranch {
		if len(jr.Bbox) != 4 {
			return d, fmt.Errorf("bbox has %d numbers, want 4 (the first result has a bbox, so all must)", len(jr.Bbox))
		}
		copy(d.Bbox[:], jr.Bbox)
		d.Area = float64(d.Bbox[2] * d.Bbox[3])
		if typ != Segm {
			return d, nil
		}
		if !seg.present {
			x1, y1 := d.Bbox[0], d.Bbox[1]
			x2, y2 := float64(x1+d.Bbox[2]), float64(y1+d.Bbox[3])
			m, err := rle.FromPolygon([]float64{x1, y1, x1, y2, x2, y2, x2, y1}, im.Height, im.Width)
			if err != nil {
				return d, fmt.Errorf("box as polygon: %w", err)
			}
			d.Mask, d.MaskFromBox = NewMask(m), true
			return d, nil
		}
		m, r, s, err := seg.mask(im.Height, im.Width, *scratch)
		*scratch = s
		if err != nil {
			return d, fmt.Errorf("segmentation: %w", err)
		}
		if err := checkMaskSize(r, im); err != nil {
			return d, err
		}
		d.Mask = m
		return d, nil
	}
	if !seg.present {
		return d, errors.New("no segmentation (the first result has no bbox, so all need one)")
	}
	m, r, s, err := seg.mask(im.Height, im.Width, *scratch)
	*scratch = s
	if err != nil {
		return d, fmt.Errorf("segmentation: %w", err)
	}
	if err := checkMaskSize(r, im); err != nil {
		return d, err
	}
	d.Area = float64(r.Area())
	if len(jr.Bbox) == 4 {
		copy(d.Bbox[:], jr.Bbox)
	} else {
		d.Bbox = r.Bbox()
	}
	if typ == Segm {
		d.Mask = m
	}
	return d, nil
}

func checkMaskSize(m rle.RLE, im Image) error {
	if m.H != im.Height || m.W != im.Width {
		return fmt.Errorf("mask size [%d, %d] differs from image %d size [%d, %d]", m.H, m.W, im.ID, im.Height, im.Width)
	}
	return nil
}
