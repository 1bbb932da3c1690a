package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets/synth"
)

func TestBenchReportsTheRun(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Images: 12, Seed: 1, Split: "train"}
	if err := synth.Generate(dir, cfg); err != nil {
		t.Fatal(err)
	}
	shards := filepath.Join(dir, "shards")
	if code, out, errs := run(t, "convert", "coco", "--annotations", synth.AnnotationsPath(dir, cfg), "--images", synth.ImagesDir(dir), "--out", shards); code != ExitOK {
		t.Fatalf("convert: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run(t, "bench", "--shards", shards, "--batch", "4", "--imgsz", "64", "--repeat", "2", "--workers", "2", "--json")
	if code != ExitOK {
		t.Fatalf("bench: exit %d\n%s\n%s", code, out, errs)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Images != 24 || r.Batches != 6 || r.Workers != 2 || r.DecodesPerImage <= 0 || r.ImagesPerSec <= 0 {
		t.Fatalf("unexpected report %+v", r)
	}
	heap := filepath.Join(dir, "heap.pb.gz")
	code, out, _ = run(t, "bench", "--shards", shards, "--batch", "4", "--imgsz", "64", "--val", "--memprofile", heap)
	if code != ExitOK || !strings.Contains(out, "images per CPU-second") || !strings.Contains(out, "decodes per output image") {
		t.Fatalf("table: exit %d\n%s", code, out)
	}
	// A heap profile is a gzipped protocol buffer.
	if b, err := os.ReadFile(heap); err != nil || len(b) < 20 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("--memprofile wrote %d bytes (%v)", len(b), err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--shards", "x", "--repeat", "0"},
		{"bench", "--shards", "x", "--cache", "lots"},
	} {
		if code, out, errs := run(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d\n%s%s", args, code, ExitUsage, out, errs)
		}
	}
	if code, out, _ := run(t, "bench", "--help"); code != ExitOK || !strings.Contains(out, "Example:") {
		t.Errorf("bench --help: exit %d\n%s", code, out)
	}
}
