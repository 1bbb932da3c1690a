package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// hostileCOCO is writeMiniCOCO's set of 5 images with image 100 given
// shard.MaxInstances+1 annotations, 101 replaced by a 65,535² PNG header,
// 102 by a 16,000² JPEG header over truncated data and 103 cut in half;
// only 104 is sound.
func hostileCOCO(t *testing.T, dir string) (string, string) {
	ann, imgs := writeMiniCOCO(t, dir, 5)
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(imgs, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("img001.png", testimg.PNGHeader(65535, 65535, 16, 6))
	write("img002.png", testimg.JPEGClaiming(16000, 16000))
	half, err := os.ReadFile(filepath.Join(imgs, "img003.png"))
	if err != nil {
		t.Fatal(err)
	}
	write("img003.png", half[:len(half)/2])
	raw, err := os.ReadFile(ann)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	anns := doc["annotations"].([]any)
	for k := range shard.MaxInstances + 1 {
		anns = append(anns, map[string]any{"id": 900000 + k, "image_id": 100, "category_id": 1, "iscrowd": 0,
			"bbox": []float64{1, 1, 4, 4}, "area": 8, "segmentation": [][]float64{{1, 1, 5, 1, 5, 5}}})
	}
	doc["annotations"] = anns
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ann, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return ann, imgs
}

// Issue 35: a 65,535² PNG, a 16,000² JPEG header, a truncated image and an
// image of 2,049 instances converted with "skipped: nothing". Each is
// skipped and counted under its reason; --strict fails on the first.
func TestConvertRefusesHostileImages(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := hostileCOCO(t, tmp)
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		want  []string
	}{
		{"default", nil, ExitOK, []string{"wrote 1 images", datasets.ReasonImageTooLarge + "          2",
			datasets.ReasonCorruptImage + "            1", datasets.ReasonTooManyInstances + "       1"}},
		{"strict", []string{"--strict"}, ExitFailure, []string{datasets.ReasonTooManyInstances}},
		{"lowered pixel bound", []string{"--max-image-pixels", "100"}, ExitOK, []string{"wrote 0 images", datasets.ReasonImageTooLarge + "          5"}},
		{"zero pixel bound", []string{"--max-image-pixels", "0"}, ExitUsage, []string{"--max-image-pixels 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", out}, tc.flags...)
			code, stdout, errs := run(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, stdout, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout+errs, w) {
					t.Errorf("output lacks %q\n%s%s", w, stdout, errs)
				}
			}
			if strings.Contains(stdout, "skipped: nothing") {
				t.Errorf("hostile images reported as nothing skipped:\n%s", stdout)
			}
			if code != ExitOK {
				return
			}
			set, err := shard.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			// A changed bound is recorded (so --resume refuses another);
			// the default leaves the manifest as it always was.
			if got, ok := set.Manifest.Source.Args["max_image_pixels"]; ok != (tc.flags != nil) || ok && got != "100" {
				t.Errorf("manifest source args %v", set.Manifest.Source.Args)
			}
		})
	}
}

// writeShardRows writes rows as one shard set in dir.
func writeShardRows(t *testing.T, dir string, rows []shard.Image) *shard.Manifest {
	t.Helper()
	w, err := shard.Create(dir, shard.WriterOptions{Categories: []shard.Category{{ID: 1, Name: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Issue 35: with a stale sha256, inspect --verify listed "sha256" alone,
// not the images with a bad crc32c inside, and called an undecodable image
// with a correct crc32c "ok". It lists every bad image (shard, row, image
// id, reason), decodes every image and says how many it decoded.
func TestInspectVerifyListsEveryBadImage(t *testing.T) {
	var rows []shard.Image
	for i := range 8 {
		w, h := 16+i, 12+i
		rows = append(rows, shard.Image{ImageID: int64(10 + i), FileName: "x.jpg", Width: int32(w), Height: int32(h), Format: "jpeg", Bytes: testimg.JPEG(w, h)})
	}
	// Cut after its header, the crc32c computed over the cut bytes: only a
	// decode tells.
	cut := testimg.JPEG(200, 150)
	rows[5].Width, rows[5].Height, rows[5].Bytes = 200, 150, cut[:len(cut)/2]
	rows[6].Width, rows[6].Height, rows[6].Format, rows[6].Bytes = 65535, 65535, "png", testimg.PNGHeader(65535, 65535, 16, 6)

	clean := t.TempDir()
	writeShardRows(t, clean, rows[:5])
	code, stdout, errs := run(t, "inspect", "--verify", clean)
	if code != ExitOK || !strings.Contains(stdout, "verify: ok (1 shards, 5 of 5 images decoded") {
		t.Fatalf("clean set: exit %d\n%s%s", code, stdout, errs)
	}

	dir := t.TempDir()
	m := writeShardRows(t, dir, rows)
	path := filepath.Join(dir, m.Shards[0].File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{1, 2, 3} { // the manifest's sha256 left stale
		at := bytes.Index(b, rows[r].Bytes)
		b[at+len(rows[r].Bytes)/2] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		row    int64
		id     int64
		reason string
	}{{-1, -1, shard.VerifySHA256}, {1, 11, shard.VerifyChecksum}, {2, 12, shard.VerifyChecksum}, {3, 13, shard.VerifyChecksum},
		{5, 15, shard.VerifyDecode}, {6, 16, shard.VerifyTooLarge}}
	code, stdout, errs = run(t, "inspect", "--verify", "--json", dir)
	var rep inspectReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != ExitFailure || rep.Verify == nil || rep.Verify.OK {
		t.Fatalf("exit %d, %v\n%s%s", code, err, stdout, errs)
	}
	v := rep.Verify
	if len(v.Bad) != len(want) || len(v.Problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(v.Bad), len(want), strings.Join(v.Problems, "\n"))
	}
	for i, w := range want {
		if p := v.Bad[i]; p.Shard != m.Shards[0].File || p.Row != w.row || p.ImageID != w.id || p.Reason != w.reason {
			t.Errorf("problem %d: %+v, want row %d image %d %s", i, p, w.row, w.id, w.reason)
		}
	}
	if !v.Decodes || v.Decoded != 3 || v.Rows != 8 {
		t.Errorf("decodes %v, %d decoded of %d rows; want rows 0, 4 and 7 decoded of 8", v.Decodes, v.Decoded, v.Rows)
	}
	if !strings.Contains(errs, "6 problems (listed above)") {
		t.Errorf("stderr %q", errs)
	}
	code, stdout, _ = run(t, "inspect", "--verify", dir)
	if code != ExitFailure || !strings.Contains(stdout, "verify: FAILED (1 shards, 8 rows checked, 3 of 8 images decoded)") ||
		!strings.Contains(stdout, "row 5: image 15: decode") || !strings.Contains(stdout, "row 3: row 3 image 13: image bytes fail their checksum") {
		t.Errorf("text report: exit %d\n%s", code, stdout)
	}
}

// Issue 35: inspect of a path that does not exist exited 1 where bench
// exits 2: it is a usage error.
func TestInspectMissingPathIsUsage(t *testing.T) {
	code, _, errs := run(t, "inspect", filepath.Join(t.TempDir(), "nope"))
	if code != ExitUsage || !strings.Contains(errs, "does not exist") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
