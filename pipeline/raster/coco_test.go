package raster

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"
)

// sharedPath locates ../shared/<rel>, or the module's copy of it
// (internal/testenv/shared), skipping the test when neither has it.
func sharedPath(tb testing.TB, rel string) string {
	tb.Helper()
	return shared.Path(tb, rel)
}

// cocoPoly is one non-crowd COCO annotation with its image size.
type cocoPoly struct {
	id, h, w int
	rings    [][]float32
}

// loadCocoPolys reads the polygon annotations of coco-tiny train and val,
// sorted by annotation id.
func loadCocoPolys(tb testing.TB) []cocoPoly {
	var out []cocoPoly
	for _, split := range []string{"train2017", "val2017"} {
		p := sharedPath(tb, "data/coco-tiny/annotations/instances_"+split+".json")
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		var doc struct {
			Images []struct {
				ID            int `json:"id"`
				Width, Height int
			} `json:"images"`
			Annotations []struct {
				ID           int             `json:"id"`
				ImageID      int             `json:"image_id"`
				IsCrowd      int             `json:"iscrowd"`
				Segmentation json.RawMessage `json:"segmentation"`
			} `json:"annotations"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		size := map[int][2]int{}
		for _, im := range doc.Images {
			size[im.ID] = [2]int{im.Height, im.Width}
		}
		for _, a := range doc.Annotations {
			if a.IsCrowd != 0 {
				continue
			}
			var polys [][]float64
			if err := json.Unmarshal(a.Segmentation, &polys); err != nil {
				tb.Fatalf("%s annotation %d: %v", p, a.ID, err)
			}
			hw, ok := size[a.ImageID]
			if !ok {
				tb.Fatalf("%s annotation %d: image %d missing", p, a.ID, a.ImageID)
			}
			cp := cocoPoly{id: a.ID, h: hw[0], w: hw[1]}
			for _, poly := range polys {
				ring := make([]float32, len(poly))
				for i, v := range poly {
					ring[i] = float32(v)
				}
				cp.rings = append(cp.rings, ring)
			}
			out = append(out, cp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// decodeCocoString decodes a pycocotools compressed RLE string (the format
// in the goldens README) into counts.
func decodeCocoString(s string) ([]uint32, error) {
	var cnts []int64
	for p := 0; p < len(s); {
		var x int64
		k := 0
		for more := true; more; k++ {
			if p >= len(s) {
				return nil, fmt.Errorf("rle string truncated at %d", p)
			}
			c := int64(s[p]) - 48
			p++
			x |= (c & 0x1f) << (5 * k)
			more = c&0x20 != 0
			if !more && c&0x10 != 0 {
				x |= -1 << (5 * (k + 1))
			}
		}
		if len(cnts) > 2 {
			x += cnts[len(cnts)-2]
		}
		if x < 0 {
			return nil, fmt.Errorf("negative run %d", x)
		}
		cnts = append(cnts, x)
	}
	out := make([]uint32, len(cnts))
	for i, c := range cnts {
		out[i] = uint32(c)
	}
	return out, nil
}

// TestAgreementWithPycocotools measures how far the cell-centre rule at
// stride 1 is from the pycocotools polygon masks (5× upsampled boundary,
// rounded vertices) on coco-tiny. The rules differ only along boundaries,
// so the figures are logged for the notes and bounded loosely; the areas
// decoded from the goldens must match exactly, which checks the decoder.
func TestAgreementWithPycocotools(t *testing.T) {
	polys := loadCocoPolys(t)
	byID := map[int]cocoPoly{}
	for _, p := range polys {
		byID[p.id] = p
	}
	var z Rasterizer
	var sumIoU, minIoU float64 = 0, 1
	var ious, smallIoUs []float64
	var inter, union, ours, theirs, exact, n int
	var bitmap []uint8
	var wins []Window
	var data []uint8
	for _, split := range []string{"train2017", "val2017"} {
		p := sharedPath(t, "goldens/masks/polygon_rle_"+split+".json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var golds []struct {
			ID     int `json:"id"`
			H, W   int
			Counts string `json:"counts"`
			Area   int    `json:"area"`
		}
		if err := json.Unmarshal(b, &golds); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, gd := range golds {
			poly, ok := byID[gd.ID]
			if !ok || poly.h != gd.H || poly.w != gd.W {
				t.Fatalf("%s: annotation %d missing or size differs", p, gd.ID)
			}
			cnts, err := decodeCocoString(gd.Counts)
			if err != nil {
				t.Fatalf("%s annotation %d: %v", p, gd.ID, err)
			}
			// Column-major golden bitmap.
			bitmap = append(bitmap[:0], make([]uint8, gd.H*gd.W)...)
			pos, area := 0, 0
			for i, c := range cnts {
				if i&1 == 1 {
					for k := pos; k < pos+int(c) && k < len(bitmap); k++ {
						bitmap[k] = 1
					}
					area += int(c)
				}
				pos += int(c)
			}
			if pos != gd.H*gd.W || area != gd.Area {
				t.Fatalf("%s annotation %d: decoded %d pixels, area %d; want %d, %d", p, gd.ID, pos, area, gd.H*gd.W, gd.Area)
			}
			g := Grid{Rows: gd.H, Cols: gd.W, Stride: 1}
			wins, data, err = z.AppendWindow(wins[:0], data[:0], g, poly.rings)
			if err != nil {
				t.Fatal(err)
			}
			w := wins[0]
			a, i := 0, 0
			for r := 0; r < int(w.H); r++ {
				for c := 0; c < int(w.W); c++ {
					if data[r*int(w.W)+c] == 1 {
						a++
						i += int(bitmap[(int(w.X0)+c)*gd.H+int(w.Y0)+r])
					}
				}
			}
			u := a + area - i
			iou := 1.0
			if u > 0 {
				iou = float64(i) / float64(u)
			}
			if a == area && i == area {
				exact++
			}
			sumIoU += iou
			ious = append(ious, iou)
			if area < 32*32 {
				smallIoUs = append(smallIoUs, iou)
			}
			minIoU = min(minIoU, iou)
			inter, union, ours, theirs = inter+i, union+u, ours+a, theirs+area
			n++
		}
	}
	mean := sumIoU / float64(n)
	pooled := float64(inter) / float64(union)
	t.Logf("coco-tiny %d polygon instances at stride 1: mean IoU %.4f, pooled IoU %.4f (intersection %d / union %d), min IoU %.4f, identical masks %d; ON pixels ours %d vs pycocotools %d (%+.2f%%)",
		n, mean, pooled, inter, union, minIoU, exact, ours, theirs, 100*float64(ours-theirs)/float64(theirs))
	sort.Float64s(ious)
	smallMean := 0.0
	for _, v := range smallIoUs {
		smallMean += v / float64(len(smallIoUs))
	}
	t.Logf("IoU quantiles: p1 %.4f, p5 %.4f, p50 %.4f; small instances (< 32² px, %d): mean IoU %.4f",
		ious[len(ious)/100], ious[len(ious)/20], ious[len(ious)/2], len(smallIoUs), smallMean)
	if n < 1000 || mean < 0.9 || pooled < 0.95 {
		t.Fatalf("agreement too low: %d instances, mean %.4f, pooled %.4f", n, mean, pooled)
	}
}
