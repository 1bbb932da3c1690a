package remote

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"

	"github.com/segpipe/segpipe/formats/shard"
)

// sharedDir finds ../shared/<rel> from the repository root (the directory
// holding go.mod) and skips when it is absent.
func sharedDir(tb testing.TB, rel string) string {
	tb.Helper()
	return shared.Path(tb, rel)
}

// cocoTinyRows reads coco-tiny train and val as loader rows: polygon
// instances only (the crowd regions, 17 of 1,520, are left out as YOLO
// training does), classes contiguous in category-id order.
func cocoTinyRows(tb testing.TB) ([]shard.Image, []string) {
	tb.Helper()
	root := sharedDir(tb, "data/coco-tiny")
	var rows []shard.Image
	var names []string
	for _, split := range []string{"train2017", "val2017"} {
		raw, err := os.ReadFile(filepath.Join(root, "annotations", "instances_"+split+".json"))
		if err != nil {
			tb.Fatal(err)
		}
		var ds struct {
			Images []struct {
				ID            int64  `json:"id"`
				FileName      string `json:"file_name"`
				Width, Height int32
			} `json:"images"`
			Annotations []struct {
				ID           int64           `json:"id"`
				ImageID      int64           `json:"image_id"`
				CategoryID   int32           `json:"category_id"`
				IsCrowd      int             `json:"iscrowd"`
				Segmentation json.RawMessage `json:"segmentation"`
			} `json:"annotations"`
			Categories []struct {
				ID   int32  `json:"id"`
				Name string `json:"name"`
			} `json:"categories"`
		}
		if err := json.Unmarshal(raw, &ds); err != nil {
			tb.Fatal(err)
		}
		sort.Slice(ds.Categories, func(i, j int) bool { return ds.Categories[i].ID < ds.Categories[j].ID })
		class := map[int32]int32{}
		names = names[:0]
		for i, c := range ds.Categories {
			class[c.ID] = int32(i)
			names = append(names, c.Name)
		}
		byImage := map[int64][]shard.Instance{}
		for _, a := range ds.Annotations {
			var polys [][]float32
			if a.IsCrowd != 0 || json.Unmarshal(a.Segmentation, &polys) != nil {
				continue
			}
			byImage[a.ImageID] = append(byImage[a.ImageID], shard.Instance{AnnID: a.ID, CategoryID: a.CategoryID, Class: class[a.CategoryID], Polygons: polys})
		}
		for _, im := range ds.Images {
			b, err := os.ReadFile(filepath.Join(root, split, im.FileName))
			if err != nil {
				tb.Fatal(err)
			}
			rows = append(rows, shard.Image{ImageID: im.ID, FileName: im.FileName, Width: im.Width, Height: im.Height,
				Format: "jpeg", Bytes: b, Instances: byImage[im.ID]})
		}
	}
	return rows, names
}
