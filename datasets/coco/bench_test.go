package coco

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

// synthAnnotations writes an annotations-only synthetic COCO file of n
// images and returns its bytes.
func synthAnnotations(tb testing.TB, n int) []byte {
	tb.Helper()
	dir := tb.TempDir()
	cfg := synth.Config{Images: n, Seed: 1, AnnotationsOnly: true}
	if err := synth.Generate(dir, cfg); err != nil {
		tb.Fatal(err)
	}
	raw, err := os.ReadFile(synth.AnnotationsPath(dir, cfg))
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkParse compares the streaming scanner with encoding/json on the
// same synthetic file (3000 images, about 22k annotations): Unmarshal into
// typed structs (what most tools do, but it holds the whole document) and
// Decoder.Token (streaming, the baseline the scanner replaces).
//
//	go test -run '^$' -bench Parse -benchtime 5x ./datasets/coco
func BenchmarkParse(b *testing.B) {
	raw := synthAnnotations(b, 3000)
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			p := newParser(bytes.NewReader(raw), "bench.json", false, &datasets.Report{}, int64(len(raw)))
			if err := p.parse(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var f struct {
				Images []struct {
					ID       int64  `json:"id"`
					FileName string `json:"file_name"`
					Width    int    `json:"width"`
					Height   int    `json:"height"`
				} `json:"images"`
				Annotations []struct {
					ID           int64           `json:"id"`
					ImageID      int64           `json:"image_id"`
					CategoryID   int             `json:"category_id"`
					Area         float64         `json:"area"`
					BBox         []float64       `json:"bbox"`
					IsCrowd      int             `json:"iscrowd"`
					Segmentation json.RawMessage `json:"segmentation"`
				} `json:"annotations"`
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				b.Fatal(err)
			}
			// Decode the polygons too, as a reader must.
			var polys [][]float32
			for _, a := range f.Annotations {
				if a.IsCrowd == 0 {
					if err := json.Unmarshal(a.Segmentation, &polys); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
	b.Run("json.Decoder.Token", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			for {
				_, err := d.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// TestOpenLargeFile opens the annotation file named by SEGPIPE_COCO_JSON
// (for example the COCO-scale synthetic file) with no images present, to
// measure parse time and peak RSS under /usr/bin/time:
//
//	go run . synth --out /tmp/synth-coco --images 118287 --annotations-only
//	go test -c -o /tmp/coco.test ./datasets/coco
//	SEGPIPE_COCO_JSON=/tmp/synth-coco/annotations/instances_train.json \
//	  /usr/bin/time -v /tmp/coco.test -test.run OpenLargeFile -test.v
func TestOpenLargeFile(t *testing.T) {
	path := os.Getenv("SEGPIPE_COCO_JSON")
	if path == "" {
		t.Skip("SEGPIPE_COCO_JSON not set")
	}
	start := time.Now()
	d, err := Open(path, filepath.Join(t.TempDir(), "no-images"), Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := d.Stats()
	t.Logf("%s: %d bytes, %d images, %d annotations, %d categories in %.2fs (%.1f MB/s, %.0f annotations/s); Go heap in use %.0f MiB, from OS %.0f MiB; skipped: %s",
		path, st.Bytes, st.Images, st.Annotations, st.Categories, el.Seconds(),
		float64(st.Bytes)/1e6/el.Seconds(), float64(st.Annotations)/el.Seconds(),
		float64(ms.HeapInuse)/(1<<20), float64(ms.Sys)/(1<<20), d.Report())
	if got := d.Report().Counts()[datasets.ReasonMissingImageFile]; got != int64(st.Images) {
		t.Errorf("%d images reported missing, want all %d", got, st.Images)
	}
}

// BenchmarkImages measures row emission (parallel file reads, header
// re-check, instance assembly) against reading the same files in one
// goroutine with os.ReadFile, on 100 synthetic 640-pixel images.
//
//	go test -run '^$' -bench Images -benchtime 20x ./datasets/coco
func BenchmarkImages(b *testing.B) {
	dir := b.TempDir()
	cfg := synth.Config{Images: 100, Seed: 2}
	if err := synth.Generate(dir, cfg); err != nil {
		b.Fatal(err)
	}
	d, err := Open(synth.AnnotationsPath(dir, cfg), synth.ImagesDir(dir), Options{Strict: true})
	if err != nil {
		b.Fatal(err)
	}
	paths, _ := filepath.Glob(filepath.Join(synth.ImagesDir(dir), "*.jpg"))
	var total int64
	for _, p := range paths {
		st, _ := os.Stat(p)
		total += st.Size()
	}
	b.Run("Images", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			if err := d.Images(b.Context(), 0, func(*shard.Image) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os.ReadFile-sequential", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			for _, p := range paths {
				if _, err := os.ReadFile(p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
