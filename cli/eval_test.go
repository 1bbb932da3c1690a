package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tinyGT = `{"images":[{"id":1,"height":10,"width":10}],
"categories":[{"id":3,"name":"cat"}],
"annotations":[{"id":1,"image_id":1,"category_id":3,"bbox":[1,1,4,4],"area":16,"iscrowd":0,
"segmentation":[[1,1,5,1,5,5,1,5]]}]}`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runEvalCLI(t *testing.T, dets string, extra ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	gt := writeFile(t, dir, "gt.json", tinyGT)
	dt := writeFile(t, dir, "dt.json", dets)
	var out, errb bytes.Buffer
	args := append([]string{"segpipe", "eval", "--annotations", gt, "--detections", dt}, extra...)
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEvalCommandErrors(t *testing.T) {
	tests := []struct {
		name, dets string
		args       []string
		code       int
		want       string
	}{
		{"nan score", `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":0.5},{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":NaN}]`, nil, ExitFailure, "detection 1"},
		{"unknown image", `[{"image_id":7,"category_id":3,"bbox":[1,1,4,4],"score":0.5}]`, nil, ExitFailure, "image_id 7"},
		{"unknown category", `[{"image_id":1,"category_id":9,"bbox":[1,1,4,4],"score":0.5}]`, nil, ExitFailure, "category_id 9"},
		{"malformed rle", `[{"image_id":1,"category_id":3,"segmentation":{"size":[10,10],"counts":"0p"},"score":0.5}]`, nil, ExitFailure, "malformed RLE"},
		{"rle wrong size", `[{"image_id":1,"category_id":3,"segmentation":{"size":[10,10],"counts":"6"},"score":0.5}]`, nil, ExitFailure, "malformed RLE"},
		{"missing score", `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4]}]`, nil, ExitFailure, "no score"},
		{"bad iou type", `[]`, []string{"--iou-type", "keypoints"}, ExitUsage, "--iou-type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runEvalCLI(t, tc.dets, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not mention %q", stderr, tc.want)
			}
		})
	}
	if _, _, stderr := runEvalCLI(t, `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":NaN}]`); !strings.Contains(stderr, "NaN") {
		t.Errorf("NaN error has no hint: %s", stderr)
	}
}

func TestEvalCommandPerfectDetection(t *testing.T) {
	dets := `[{"image_id":1,"category_id":3,"bbox":[1,1,4,4],"score":0.9,"segmentation":[[1,1,5,1,5,5,1,5]]}]`
	code, out, stderr := runEvalCLI(t, dets, "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res []struct {
		IoUType string             `json:"iou_type"`
		Stats   map[string]float64 `json:"stats"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want bbox and segm", len(res))
	}
	for _, r := range res {
		// One small GT found exactly: AP 1 (less COCOeval's eps in the
		// precision denominator) and -1 for the empty medium range.
		near := func(v float64) bool { return v > 1-1e-12 && v <= 1 }
		if !near(r.Stats["AP"]) || !near(r.Stats["APs"]) || r.Stats["APm"] != -1 || r.Stats["AR1"] != 1 {
			t.Errorf("%s: stats %v", r.IoUType, r.Stats)
		}
	}
	code, out, _ = runEvalCLI(t, dets, "--iou-type", "segm", "--per-category")
	if code != ExitOK || !strings.Contains(out, " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 1.000") {
		t.Errorf("table output:\n%s", out)
	}
	if !strings.Contains(out, "       3  cat                   1.000  1.000  1.000  1.000") {
		t.Errorf("per-category output:\n%s", out)
	}
}
