package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segpipe/segpipe/internal/testenv/shared"

	"github.com/segpipe/segpipe/formats/shard"
)

// run executes the command line in-process and returns its exit code and
// output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"segpipe", "--log-level", "warn"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// repoShared locates ../shared/rel relative to the repository root (the
// directory holding go.mod) and skips the test when it is absent.
func repoShared(t testing.TB, rel string) string {
	t.Helper()
	return shared.Path(t, rel)
}

// writeMiniCOCO writes a small valid COCO dataset (PNG images drawn here,
// polygons, a crowd RLE, an empty image) and returns the annotation file
// and image directory.
func writeMiniCOCO(t testing.TB, dir string, nImages int) (string, string) {
	t.Helper()
	imgDir := filepath.Join(dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	type ann struct {
		ID           int64     `json:"id"`
		ImageID      int64     `json:"image_id"`
		CategoryID   int       `json:"category_id"`
		BBox         []float64 `json:"bbox"`
		Area         float64   `json:"area"`
		IsCrowd      int       `json:"iscrowd"`
		Segmentation any       `json:"segmentation"`
	}
	type img struct {
		ID       int64  `json:"id"`
		FileName string `json:"file_name"`
		Width    int    `json:"width"`
		Height   int    `json:"height"`
	}
	var doc struct {
		Images      []img            `json:"images"`
		Annotations []ann            `json:"annotations"`
		Categories  []map[string]any `json:"categories"`
	}
	doc.Categories = []map[string]any{
		{"id": 1, "name": "person", "supercategory": "person"},
		{"id": 7, "name": "train", "supercategory": "vehicle"},
	}
	for i := 0; i < nImages; i++ {
		w, h := 40+i%7, 30+i%5
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		for p := range m.Pix {
			m.Pix[p] = byte(p*7 + i)
		}
		m.Set(0, 0, color.NRGBA{R: byte(i), A: 255})
		var buf bytes.Buffer
		if err := png.Encode(&buf, m); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("img%03d.png", i)
		if err := os.WriteFile(filepath.Join(imgDir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		id := int64(100 + i)
		doc.Images = append(doc.Images, img{ID: id, FileName: name, Width: w, Height: h})
		if i%4 == 3 {
			continue // an image without annotations
		}
		doc.Annotations = append(doc.Annotations, ann{
			ID: id*10 + 1, ImageID: id, CategoryID: 1 + 6*(i%2), BBox: []float64{1.5, 2, 10, 12}, Area: 60.25,
			Segmentation: [][]float64{{1.5, 2, 11.5, 2, 11.5, 14, 1.25, 13.75}, {20, 20, 25, 20, 22.5, 24.125}},
		})
		if i%3 == 0 {
			doc.Annotations = append(doc.Annotations, ann{
				ID: id*10 + 2, ImageID: id, CategoryID: 1, BBox: []float64{0, 0, 2, 2}, Area: 4, IsCrowd: 1,
				Segmentation: map[string]any{"size": []int{h, w}, "counts": []int{w * 2, 2, w*h - w*2 - 2}},
			})
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	annPath := filepath.Join(dir, "instances_mini.json")
	if err := os.WriteFile(annPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return annPath, imgDir
}

func TestExitCodes(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 3)
	done := filepath.Join(tmp, "done")
	if code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", done); code != ExitOK {
		t.Fatalf("setup convert: exit %d: %s", code, errs)
	}
	emptyDir := filepath.Join(tmp, "other-split")
	os.Mkdir(emptyDir, 0o755)
	bad := filepath.Join(tmp, "bad.json")
	os.WriteFile(bad, []byte(`{"images": [{"id": 1, `), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"inspect without path", []string{"inspect"}, ExitUsage, "exactly one PATH"},
		{"inspect two paths", []string{"inspect", "a", "b"}, ExitUsage, "exactly one PATH"},
		{"unknown flag", []string{"inspect", "--frobnicate", done}, ExitUsage, "frobnicate"},
		{"convert missing --out", []string{"convert", "coco", "--annotations", ann, "--images", imgs}, ExitUsage, "out"},
		{"bad shard size", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", tmp + "/x", "--shard-size", "lots"}, ExitUsage, "--shard-size"},
		{"negative workers", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", tmp + "/x", "--workers", "-2"}, ExitUsage, "--workers"},
		{"stray argument", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", tmp + "/x", "extra"}, ExitUsage, "extra"},
		{"inspect missing dir", []string{"inspect", filepath.Join(tmp, "nope")}, ExitUsage, "does not exist"},
		{"inspect directory without a manifest", []string{"inspect", emptyDir}, ExitFailure, "not a finished shard directory"},
		{"annotations missing", []string{"convert", "coco", "--annotations", tmp + "/none.json", "--images", imgs, "--out", tmp + "/y"}, ExitUsage, "none.json"},
		// Issue 16: these exited 0 with "wrote 0 images" (or 1 with
		// "byte 0: reading"); they are usage errors that say what to pass.
		{"annotations is a directory", []string{"convert", "coco", "--annotations", tmp, "--images", imgs, "--out", tmp + "/y"}, ExitUsage, "COCO instances JSON file"},
		{"images missing", []string{"convert", "coco", "--annotations", ann, "--images", tmp + "/nope", "--out", tmp + "/y"}, ExitUsage, "is not a directory"},
		{"images is a file", []string{"convert", "coco", "--annotations", ann, "--images", ann, "--out", tmp + "/y"}, ExitUsage, "is not a directory"},
		{"images of another split", []string{"convert", "coco", "--annotations", ann, "--images", emptyDir, "--out", tmp + "/y"}, ExitUsage, "3 of the 3 listed images are missing"},
		{"truncated json", []string{"convert", "coco", "--annotations", bad, "--images", imgs, "--out", tmp + "/z"}, ExitFailure, "bad.json"},
		{"non-empty out without --resume", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", done}, ExitFailure, "--resume"},
		{"resume of finished run", []string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", done, "--resume"}, ExitOK, ""},
		{"inspect ok", []string{"inspect", done}, ExitOK, ""},
		{"help", []string{"convert", "coco", "--help"}, ExitOK, ""},
		// Issue 30: settings the loader refuses are usage errors whichever
		// command passes them, and a missing shard path is named as such.
		{"bench imgsz not a multiple of the stride", []string{"bench", "--shards", done, "--imgsz", "7"}, ExitUsage, "imgsz 7"},
		{"bench negative imgsz", []string{"bench", "--shards", done, "--imgsz", "-320"}, ExitUsage, "imgsz -320"},
		{"bench mosaic out of range", []string{"bench", "--shards", done, "--mosaic", "2"}, ExitUsage, "mosaic 2"},
		{"bench negative workers", []string{"bench", "--shards", done, "--workers", "-1"}, ExitUsage, "-1 workers"},
		{"bench huge batch", []string{"bench", "--shards", done, "--batch", "100000"}, ExitUsage, "batch size 100000"},
		{"dump huge batch", []string{"dump", "--shards", done, "--batch", "100000", "--out", tmp + "/d.arrows"}, ExitUsage, "batch size 100000"},
		{"bench missing shards", []string{"bench", "--shards", tmp + "/nope"}, ExitUsage, "does not exist"},
		{"dump missing shards", []string{"dump", "--shards", tmp + "/nope", "--out", tmp + "/d.arrows"}, ExitUsage, "does not exist"},
		{"bench shards is a file", []string{"bench", "--shards", ann}, ExitUsage, "is not a directory"},
		{"serve missing shards", []string{"serve", "--shards", tmp + "/nope"}, ExitUsage, "does not exist"},
		{"bench directory without a manifest", []string{"bench", "--shards", emptyDir}, ExitFailure, "manifest.json"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
		{"unknown command lists commands", []string{"frobnicate"}, ExitUsage, "convert, bench, inspect"},
		{"unknown command points to help", []string{"frobnicate"}, ExitUsage, "segpipe --help"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := run(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			if !strings.Contains(out+errs, tc.msg) {
				t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", tc.msg, out, errs)
			}
		})
	}
}

func TestHelpHasDescriptionAndExample(t *testing.T) {
	for _, args := range [][]string{{"convert"}, {"convert", "coco"}, {"convert", "yolo"}, {"inspect"}, {"quickstart"}} {
		code, out, _ := run(t, append(args, "--help")...)
		if code != ExitOK || !strings.Contains(out, "Example:") || !strings.Contains(out, "segpipe "+strings.Join(args, " ")) {
			t.Errorf("%v --help: exit %d, output:\n%s", args, code, out)
		}
	}
}

func TestConvertSkipSummaryAndStrict(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 6)
	if err := os.Remove(filepath.Join(imgs, "img002.png")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	code, stdout, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "skipped 1 items") || !strings.Contains(stdout, "missing_image_file") || !strings.Contains(stdout, "wrote 5 images") {
		t.Fatalf("summary:\n%s", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Skipped map[string]int64 }
	if err := json.Unmarshal(b, &m); err != nil || m.Skipped["missing_image_file"] != 1 {
		t.Fatalf("manifest skipped = %v (%v)", m.Skipped, err)
	}
	code, _, errs = run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", filepath.Join(tmp, "strict"), "--strict")
	if code != ExitFailure || !strings.Contains(errs, "img002.png") || !strings.Contains(errs, "missing_image_file") {
		t.Fatalf("--strict: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(tmp, "strict", "manifest.json")); err == nil {
		t.Fatal("--strict failure left a manifest")
	}
}

func TestProgressLogsWhenNotATerminal(t *testing.T) {
	var logs bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer func(d time.Duration) { progressInterval = d }(progressInterval)
	progressInterval = 0

	p := newProgress(&bytes.Buffer{}, "convert", 4, 1)
	p.add(1, 1000)
	p.add(2, 3000)
	p.finish()
	out := logs.String()
	for _, want := range []string{"convert progress", "done=2", "done=4", "total=4", "percent=100", "convert finished"} {
		if !strings.Contains(out, want) {
			t.Fatalf("logs lack %q:\n%s", want, out)
		}
	}
}

// repoRoot is the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

func TestConvertYolo(t *testing.T) {
	data := filepath.Join(repoRoot(t), "testdata", "yolo", "good", "data.yaml")
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, errs := run(t, "convert", "yolo", "--data", data, "--split", "train", "--out", out)
	if code != ExitOK || !strings.Contains(stdout, "wrote 3 images, 3 instances, 3 categories") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, errs)
	}
	set, err := shard.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if set.Manifest.Source.Kind != "yolo" || set.Manifest.Source.Args["split"] != "train" {
		t.Errorf("source %+v", set.Manifest.Source)
	}
	if err := set.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, "convert", "yolo", "--data", data, "--split", "nosuch", "--out", t.TempDir()+"/x"); code != ExitFailure || !strings.Contains(errs, "nosuch") {
		t.Errorf("unknown split: exit %d: %s", code, errs)
	}
	if code, _, _ := run(t, "convert", "yolo", "--split", "train", "--out", t.TempDir()+"/y"); code != ExitUsage {
		t.Errorf("missing --data: exit %d", code)
	}
}
