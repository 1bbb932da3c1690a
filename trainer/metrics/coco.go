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
	Area         float64         `json:"area"`
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
		a := Annotation{ID: ja.ID, ImageID: ja.ImageID, CategoryID: ja.CategoryID, Area: ja.Area, IsCrowd: ja.IsCrowd != 0}
		if len(ja.Bbox) == 4 {
			copy(a.Bbox[:], ja.Bbox)
		} else if ja.Bbox != nil {
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
	Mask *rle.RLE
	// MaskFromBox reports that the result had no segmentation and Mask is
	// its box's polygon (loadRes' box branch).
	MaskFromBox bool
}

type jsonResult struct {
	ImageID      *int64          `json:"image_id"`
	CategoryID   *int64          `json:"category_id"`
	Bbox         []float64       `json:"bbox"`
	Score        *float64        `json:"score"`
	Segmentation json.RawMessage `json:"segmentation"`
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
		d, err := ds.loadResult(i, &jr, boxBranch, typ)
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

func (ds *Dataset) loadResult(i int, jr *jsonResult, boxBranch bool, typ IoUType) (Detection, error) {
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
	hasSeg := hasJSON(jr.Segmentation)
	if boxBranch {
		if len(jr.Bbox) != 4 {
			return d, fmt.Errorf("bbox has %d numbers, want 4 (the first result has a bbox, so all must)", len(jr.Bbox))
		}
		copy(d.Bbox[:], jr.Bbox)
		d.Area = float64(d.Bbox[2] * d.Bbox[3])
		if typ == Segm {
			var m rle.RLE
			var err error
			if hasSeg {
				m, err = parseSegmentation(jr.Segmentation, im.Height, im.Width)
			} else {
				x1, y1 := d.Bbox[0], d.Bbox[1]
				x2, y2 := float64(x1+d.Bbox[2]), float64(y1+d.Bbox[3])
				m, err = rle.FromPolygon([]float64{x1, y1, x1, y2, x2, y2, x2, y1}, im.Height, im.Width)
				d.MaskFromBox = true
			}
			if err != nil {
				return d, fmt.Errorf("segmentation: %w", err)
			}
			if err := checkMaskSize(m, im); err != nil {
				return d, err
			}
			d.Mask = &m
		}
		return d, nil
	}
	if !hasSeg {
		return d, errors.New("no segmentation (the first result has no bbox, so all need one)")
	}
	m, err := parseSegmentation(jr.Segmentation, im.Height, im.Width)
	if err != nil {
		return d, fmt.Errorf("segmentation: %w", err)
	}
	if err := checkMaskSize(m, im); err != nil {
		return d, err
	}
	d.Area = float64(m.Area())
	if len(jr.Bbox) == 4 {
		copy(d.Bbox[:], jr.Bbox)
	} else {
		d.Bbox = m.Bbox()
	}
	if typ == Segm {
		d.Mask = &m
	}
	return d, nil
}

func checkMaskSize(m rle.RLE, im Image) error {
	if m.H != im.Height || m.W != im.Width {
		return fmt.Errorf("mask size [%d, %d] differs from image %d size [%d, %d]", m.H, m.W, im.ID, im.Height, im.Width)
	}
	return nil
}
