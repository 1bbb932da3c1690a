package yolo

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// Issue 35: a label file of 1,000,000 lines converted, then the loader
// asked for a 51 GB mask buffer. An image over shard.MaxInstances, a label
// file over MaxLabelBytes, an image too large or cut short: each is
// skipped and counted when the set is opened, and fails it under Strict.
func TestHostileInputsAreSkippedAndCounted(t *testing.T) {
	jpg := testimg.JPEG(64, 48)
	lines := func(n int) string { return strings.Repeat("0 0.5 0.5 0.25 0.25\n", n) }
	for _, tc := range []struct {
		name   string
		image  []byte
		label  string
		sparse int64 // label file of this many zero bytes instead
		reason string
		kept   int // instances of the case's image when kept
	}{
		{name: "at the instance limit", image: jpg, label: lines(shard.MaxInstances), kept: shard.MaxInstances},
		{name: "bad lines do not count", image: jpg, label: strings.Repeat("0 x\n", 10) + lines(shard.MaxInstances), kept: shard.MaxInstances},
		{name: "one over the limit", image: jpg, label: lines(shard.MaxInstances + 1), reason: datasets.ReasonTooManyInstances},
		{name: "a million lines", image: jpg, label: lines(1_000_000), reason: datasets.ReasonTooManyInstances},
		{name: "label file over MaxLabelBytes", image: jpg, sparse: MaxLabelBytes + 1, reason: ReasonLabelFileTooLarge},
		{name: "65535² png", image: testimg.HugePNG(), label: lines(1), reason: datasets.ReasonImageTooLarge},
		{name: "16000² jpeg header", image: testimg.JPEGClaiming(16000, 16000), label: lines(1), reason: datasets.ReasonImageTooLarge},
		{name: "jpeg cut in half", image: testimg.Half(jpg), label: lines(1), reason: datasets.ReasonCorruptImage},
		{name: "png cut in half", image: testimg.Half(testimg.PNG(64, 48)), label: lines(1), reason: datasets.ReasonCorruptImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.label == lines(1_000_000) && testing.Short() {
				t.Skip("20 MB label file")
			}
			dir := t.TempDir()
			ext := ".jpg"
			if string(tc.image[1:4]) == "PNG" {
				ext = ".png"
			}
			write := func(rel string, b []byte) {
				p := filepath.Join(dir, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("data.yaml", []byte("path: .\ntrain: images/train\nnames:\n  0: thing\n"))
			write("images/train/a.jpg", jpg)
			write("labels/train/a.txt", []byte(lines(1)))
			write("images/train/b"+ext, tc.image)
			write("labels/train/b.txt", []byte(tc.label))
			if tc.sparse > 0 {
				if err := os.Truncate(filepath.Join(dir, "labels", "train", "b.txt"), tc.sparse); err != nil {
					t.Fatal(err)
				}
			}
			yaml := filepath.Join(dir, "data.yaml")
			d, err := Open(yaml, "train", Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			rs := rows(t, d)
			if tc.reason == "" {
				if len(rs) != 2 || len(rs[1].Instances) != tc.kept {
					t.Fatalf("%d rows, want 2 with %d instances in the second", len(rs), tc.kept)
				}
				return
			}
			if want := map[string]int64{tc.reason: 1}; !maps.Equal(d.Report().Counts(), want) || len(rs) != 1 || len(rs[0].Instances) != 1 {
				t.Fatalf("counts %v, %d rows; want %v and the valid image alone", d.Report().Counts(), len(rs), want)
			}
			// Nothing of the skipped image stays in the arenas.
			if n := len(d.Src.Store.Anns); n != 1 {
				t.Errorf("%d instances held, want the valid image's 1", n)
			}
			if _, err := Open(yaml, "train", Options{Strict: true, Logger: quiet}); !errors.Is(err, datasets.ErrBadInput) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("strict: %v, want %s", err, tc.reason)
			}
		})
	}
}
