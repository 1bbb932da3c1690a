package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/rle"
)

const smallGT = `{"images":[{"id":1,"height":10,"width":10},{"id":2,"height":8,"width":6}],
"categories":[{"id":3,"name":"cat"},{"id":1,"name":"person"}],
"annotations":[
{"id":1,"image_id":1,"category_id":3,"bbox":[1,1,4,4],"area":16,"iscrowd":0,"segmentation":[[1,1,5,1,5,5,1,5]]},
{"id":2,"image_id":2,"category_id":1,"bbox":[0,0,6,8],"area":48,"iscrowd":1,"segmentation":{"size":[8,6],"counts":[0,48]}}]}`

func mustDataset(t *testing.T) *Dataset {
	t.Helper()
	ds, err := ReadDataset(strings.NewReader(smallGT))
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestReadDatasetSortsAndIndexes(t *testing.T) {
	ds := mustDataset(t)
	if ds.Categories[0].ID != 1 || ds.Categories[1].ID != 3 {
		t.Errorf("categories not ascending: %v", ds.Categories)
	}
	if err := ds.buildMasks(); err != nil {
		t.Fatal(err)
	}
	if ds.masks[0].Area() != 16 || ds.masks[1].Area() != 48 {
		t.Errorf("mask areas %d %d", ds.masks[0].Area(), ds.masks[1].Area())
	}
}

func TestReadDatasetErrors(t *testing.T) {
	tests := []struct{ name, json, want string }{
		{"dup image", `{"images":[{"id":1,"height":2,"width":2},{"id":1,"height":2,"width":2}],"categories":[],"annotations":[]}`, "duplicate image id 1"},
		{"unknown image", `{"images":[],"categories":[{"id":1}],"annotations":[{"id":5,"image_id":9,"category_id":1,"area":1}]}`, "unknown image id 9"},
		{"unknown category", `{"images":[{"id":1,"height":2,"width":2}],"categories":[],"annotations":[{"id":5,"image_id":1,"category_id":4,"area":1}]}`, "unknown category id 4"},
		{"no area", `{"images":[{"id":1,"height":2,"width":2}],"categories":[{"id":1}],"annotations":[{"id":5,"image_id":1,"category_id":1}]}`, "no area"},
		{"bad bbox", `{"images":[{"id":1,"height":2,"width":2}],"categories":[{"id":1}],"annotations":[{"id":5,"image_id":1,"category_id":1,"area":1,"bbox":[1,2]}]}`, "bbox has 2"},
		{"not json", `{"images":[`, "ground truth"},
	}
	for _, tc := range tests {
		_, err := ReadDataset(strings.NewReader(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestReadResultsLoadResRules(t *testing.T) {
	ds := mustDataset(t)
	// Box branch: area is the box area even for segm, ids are 1..N, a
	// missing segmentation becomes the box polygon.
	dets, err := ReadResults(ds, strings.NewReader(`[
		{"image_id":1,"category_id":3,"bbox":[1,1,4,2],"score":0.5},
		{"image_id":1,"category_id":3,"bbox":[0,0,0,0],"score":0.7,"segmentation":{"size":[10,10],"counts":"`+rle.Encode([]uint32{100})+`"}}]`), Segm)
	if err != nil {
		t.Fatal(err)
	}
	if dets[0].ID != 1 || dets[1].ID != 2 || dets[0].Area != 8 || dets[1].Area != 0 {
		t.Errorf("ids/areas: %+v", dets)
	}
	if r, _ := dets[0].Mask.RLE(); r.Area() != 8 || !dets[0].MaskFromBox {
		t.Errorf("box polygon mask area %d", r.Area())
	}
	// Segm branch: area is the pixel count, bbox the mask's box.
	m, _ := rle.FromBox([4]float64{2, 3, 3, 2}, 10, 10)
	dets, err = ReadResults(ds, strings.NewReader(`[{"image_id":1,"category_id":3,"score":0.5,"segmentation":{"size":[10,10],"counts":"`+m.String()+`"}}]`), Segm)
	if err != nil {
		t.Fatal(err)
	}
	if dets[0].Area != 6 || dets[0].Bbox != [4]float64{2, 3, 3, 2} {
		t.Errorf("segm branch: area %v bbox %v", dets[0].Area, dets[0].Bbox)
	}
}

func TestReadResultsErrors(t *testing.T) {
	ds := mustDataset(t)
	tests := []struct{ name, json, want string }{
		{"not a list", `{"image_id":1}`, "want a JSON list"},
		{"nan", `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":NaN}]`, "detection 0"},
		{"later box missing", `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":1},{"image_id":1,"category_id":3,"score":1,"segmentation":[[1,1,4,1,4,4]]}]`, "detection 1: bbox has 0"},
		{"segm missing", `[{"image_id":1,"category_id":3,"score":1,"segmentation":[[1,1,4,1,4,4]]},{"image_id":1,"category_id":3,"score":1}]`, "detection 1: no segmentation"},
		{"four-number polygon", `[{"image_id":1,"category_id":3,"score":1,"segmentation":[[1,1,4,4]]}]`, "exactly 4 numbers"},
		{"size mismatch", `[{"image_id":2,"category_id":3,"score":1,"segmentation":{"size":[10,10],"counts":"0"}}]`, "malformed RLE"},
		{"wrong image size", `[{"image_id":2,"category_id":3,"score":1,"segmentation":{"size":[6,8],"counts":"` + rle.Encode([]uint32{48}) + `"}}]`, "differs from image 2"},
		{"no counts", `[{"image_id":1,"category_id":3,"score":1,"segmentation":{"size":[10,10]}}]`, "without counts"},
		{"no image", `[{"category_id":3,"score":1,"bbox":[1,1,1,1]}]`, "no image_id"},
		{"truncated", `[{"image_id":1,"category_id":3,"score":1,"bbox":[1,1,1,1]}`, "after detection 1"},
	}
	for _, tc := range tests {
		_, err := ReadResults(ds, strings.NewReader(tc.json), Segm)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			continue
		}
		if !errors.Is(err, ErrBadResults) {
			t.Errorf("%s: %v does not wrap ErrBadResults", tc.name, err)
		}
	}
}

func FuzzReadResults(f *testing.F) {
	f.Add(`[{"image_id":1,"category_id":3,"bbox":[1,1,4,2],"score":0.5}]`)
	f.Add(`[{"image_id":1,"category_id":3,"score":0.5,"segmentation":{"size":[10,10],"counts":"` + rle.Encode([]uint32{20, 30, 50}) + `"}}]`)
	f.Add(`[{"image_id":2,"category_id":1,"score":0.5,"segmentation":[[0,0,5,0,5,5,0,5],[1,1,2]]}]`)
	f.Fuzz(func(t *testing.T, s string) {
		ds, err := ReadDataset(strings.NewReader(smallGT))
		if err != nil {
			t.Fatal(err)
		}
		dets, err := ReadResults(ds, strings.NewReader(s), Segm)
		if err != nil {
			return
		}
		for _, typ := range []IoUType{BBox, Segm} {
			res, err := Evaluate(ds, dets, typ)
			if err != nil {
				t.Fatalf("accepted results fail to evaluate: %v", err)
			}
			for i, v := range res.Stats {
				if v != -1 && (v < 0 || v > 1) {
					t.Fatalf("%s %s = %v", typ, StatNames[i], v)
				}
			}
		}
	})
}

// writeDataset writes ds back as COCO instances JSON, the fields
// ReadDataset keeps and nothing else.
func writeDataset(t *testing.T, ds *Dataset) []byte {
	t.Helper()
	type jsonAnn struct {
		ID           int64           `json:"id"`
		ImageID      int64           `json:"image_id"`
		CategoryID   int64           `json:"category_id"`
		Bbox         []float64       `json:"bbox,omitempty"`
		Area         float64         `json:"area"`
		IsCrowd      int             `json:"iscrowd"`
		Segmentation json.RawMessage `json:"segmentation,omitempty"`
	}
	var out struct {
		Images      []jsonImage    `json:"images"`
		Categories  []jsonCategory `json:"categories"`
		Annotations []jsonAnn      `json:"annotations"`
	}
	for _, im := range ds.Images {
		out.Images = append(out.Images, jsonImage{ID: im.ID, Height: im.Height, Width: im.Width})
	}
	for _, c := range ds.Categories {
		out.Categories = append(out.Categories, jsonCategory{ID: c.ID, Name: c.Name})
	}
	for _, a := range ds.Annotations {
		ja := jsonAnn{ID: a.ID, ImageID: a.ImageID, CategoryID: a.CategoryID, Area: a.Area, Segmentation: a.Segmentation}
		if a.hasBbox {
			ja.Bbox = a.Bbox[:]
		}
		if a.IsCrowd {
			ja.IsCrowd = 1
		}
		out.Annotations = append(out.Annotations, ja)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&out); err != nil {
		t.Fatalf("write dataset: %v", err)
	}
	return buf.Bytes()
}

// compactSegmentations replaces each annotation's raw segmentation by its
// compact form, the one writeDataset writes.
func compactSegmentations(t *testing.T, ds *Dataset) {
	t.Helper()
	for i := range ds.Annotations {
		a := &ds.Annotations[i]
		if a.Segmentation == nil {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, a.Segmentation); err != nil {
			t.Fatalf("annotation %d: segmentation %q: %v", a.ID, a.Segmentation, err)
		}
		a.Segmentation = buf.Bytes()
	}
}

// FuzzReadDataset holds the reader to a round trip: a dataset it accepts,
// written back, reads to the same dataset (indexes included), and one
// whose every annotation has a box evaluates as bbox.
func FuzzReadDataset(f *testing.F) {
	f.Add(smallGT)
	f.Add(`{"images":[{"id":5,"height":4,"width":4}],"categories":[{"id":1,"name":"a<b>&"}],
"annotations":[{"id":9,"image_id":5,"category_id":1,"area":1.5,"segmentation":null}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		ds, err := ReadDataset(strings.NewReader(s))
		if err != nil {
			return
		}
		written := writeDataset(t, ds)
		again, err := ReadDataset(bytes.NewReader(written))
		if err != nil {
			t.Fatalf("dataset written back does not read: %v\n%s", err, written)
		}
		compactSegmentations(t, ds)
		compactSegmentations(t, again)
		if !reflect.DeepEqual(ds, again) {
			t.Fatalf("dataset read back differs:\nread    %+v\nwritten %s\nreread  %+v", ds, written, again)
		}

		if len(ds.Annotations) > 50 {
			return
		}
		for _, a := range ds.Annotations {
			if im := ds.Images[ds.imgIdx[a.ImageID]]; im.Height*im.Width > 1<<16 {
				return // keep each input cheap to rasterise
			}
		}
		_, _ = Evaluate(ds, nil, Segm)
		boxes := true
		for _, a := range ds.Annotations {
			boxes = boxes && a.hasBbox
		}
		if _, err := Evaluate(ds, nil, BBox); boxes && err != nil {
			t.Fatalf("bbox evaluation of ground truth with boxes: %v", err)
		}
	})
}
