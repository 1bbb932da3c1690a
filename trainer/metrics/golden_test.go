package metrics

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type expected struct {
	Stats       map[string]float64 `json:"stats"`
	StatsList   []float64          `json:"stats_list"`
	PerCategory []map[string]any   `json:"per_category"`
	SummaryText []string           `json:"summary_text"`
	NumDets     int                `json:"num_dets"`
}

// TestGoldenCOCOeval reproduces pycocotools' COCOeval on the four
// detection sets, for bbox and segm: every summary stat and every
// per-category value within 1e-6, and the printed table.
func TestGoldenCOCOeval(t *testing.T) {
	shared := sharedDir(t)
	ds, err := ReadDatasetFile(filepath.Join(shared, "data", "coco-tiny", "annotations", "instances_val2017.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(shared, "goldens", "cocoeval")
	for _, set := range []string{"nearperfect", "noisy", "sparse", "ties"} {
		for _, typ := range []IoUType{BBox, Segm} {
			t.Run(set+"_"+string(typ), func(t *testing.T) {
				var want expected
				b, err := os.ReadFile(filepath.Join(dir, "expected_"+set+"_"+string(typ)+".json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &want); err != nil {
					t.Fatal(err)
				}
				dets, err := ReadResultsFile(ds, filepath.Join(dir, "dets_"+set+"_"+string(typ)+".json"), typ)
				if err != nil {
					t.Fatal(err)
				}
				if len(dets) != want.NumDets {
					t.Fatalf("%d detections, want %d", len(dets), want.NumDets)
				}
				res, err := Evaluate(ds, dets, typ)
				if err != nil {
					t.Fatal(err)
				}
				const tol = 1e-6
				worst := 0.0
				for i, name := range StatNames {
					got, w := res.Stats[i], want.StatsList[i]
					worst = max(worst, math.Abs(got-w))
					if math.Abs(got-w) > tol {
						t.Errorf("%s = %.12f, want %.12f", name, got, w)
					}
					if w2 := want.Stats[name]; w2 != w {
						t.Fatalf("fixture inconsistent for %s", name)
					}
				}
				if len(res.PerCategory) != len(want.PerCategory) {
					t.Fatalf("%d categories, want %d", len(res.PerCategory), len(want.PerCategory))
				}
				for k, wc := range want.PerCategory {
					gc := res.PerCategory[k]
					if float64(gc.ID) != wc["category_id"].(float64) {
						t.Fatalf("category %d is %d, want %v", k, gc.ID, wc["category_id"])
					}
					for i, name := range StatNames {
						w := wc[name].(float64)
						worst = max(worst, math.Abs(gc.Stats[i]-w))
						if math.Abs(gc.Stats[i]-w) > tol {
							t.Errorf("category %d %s = %.12f, want %.12f", gc.ID, name, gc.Stats[i], w)
						}
					}
				}
				var sb strings.Builder
				if err := res.WriteTable(&sb); err != nil {
					t.Fatal(err)
				}
				if got := strings.Split(strings.TrimSuffix(sb.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want.SummaryText, "\n") {
					t.Errorf("table differs:\n%s\nwant:\n%s", sb.String(), strings.Join(want.SummaryText, "\n"))
				}
				t.Logf("max abs deviation %.3g", worst)
			})
		}
	}
}

func TestThresholdsAreNumpyLinspace(t *testing.T) {
	want := []float64{0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.8999999999999999, 0.95}
	for i, w := range want {
		if IoUThresholds[i] != w {
			t.Errorf("IoUThresholds[%d] = %v, want %v", i, IoUThresholds[i], w)
		}
	}
	differ := map[int]bool{35: true, 41: true, 47: true, 57: true, 69: true, 70: true, 82: true, 83: true, 94: true, 95: true}
	for i, r := range RecallThresholds {
		if r != float64(i)*0.01 {
			t.Errorf("RecallThresholds[%d] = %v, want %v", i, r, float64(i)*0.01)
		}
		if (r != float64(i)/100) != differ[i] {
			t.Errorf("RecallThresholds[%d] = %v: differs from i/100 = %v", i, r, differ[i])
		}
	}
	if RecallThresholds[35] != 0.35000000000000003 {
		t.Errorf("RecallThresholds[35] = %v", RecallThresholds[35])
	}
}
