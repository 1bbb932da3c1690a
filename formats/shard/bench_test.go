package shard

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// benchImages are COCO-like rows: ~100 KB of (incompressible) image bytes
// and 7 instances of two 20-point rings each.
func benchImages(n int) []Image {
	r := rand.New(rand.NewPCG(9, 9))
	out := make([]Image, n)
	for i := range out {
		img := Image{ImageID: int64(i), FileName: "x.jpg", Width: 640, Height: 480, Format: "jpeg", Bytes: make([]byte, 80<<10+r.IntN(40<<10))}
		for j := range img.Bytes {
			img.Bytes[j] = byte(r.Uint32())
		}
		for k := 0; k < 7; k++ {
			in := Instance{AnnID: int64(i*10 + k), CategoryID: 1, BBox: [4]float32{1, 2, 3, 4}, Area: 12}
			for p := 0; p < 2; p++ {
				ring := make([]float32, 40)
				for q := range ring {
					ring[q] = float32(r.IntN(64000)) / 100
				}
				in.Polygons = append(in.Polygons, ring)
			}
			img.Instances = append(img.Instances, in)
		}
		out[i] = img
	}
	return out
}

// BenchmarkWrite measures the shard writer on rows already in memory
// against writing the same image bytes to one fsynced file, in the same
// run:
//
//	go test ./formats/shard -run '^$' -bench Write -benchtime 10x -count 3
func BenchmarkWrite(b *testing.B) {
	imgs := benchImages(200)
	var total int64
	for i := range imgs {
		total += int64(len(imgs[i].Bytes))
	}
	report := func(b *testing.B) {
		secs := b.Elapsed().Seconds()
		b.ReportMetric(float64(len(imgs)*b.N)/secs, "images/s")
		b.ReportMetric(float64(total*int64(b.N))/1e6/secs, "MB/s")
	}
	b.Run("shard-writer", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			w, err := Create(b.TempDir(), WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for j := range imgs {
				if err := w.Write(&imgs[j]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := w.Close(nil); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("baseline-raw-write", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			for j := range imgs {
				if _, err := f.Write(imgs[j].Bytes); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		report(b)
	})
}

// BenchmarkRead streams the rows back as record batches and as decoded
// Images, against reading the shard file's bytes.
//
//	go test ./formats/shard -run '^$' -bench Read -benchtime 10x -count 3
func BenchmarkRead(b *testing.B) {
	imgs := benchImages(200)
	dir := b.TempDir()
	w, err := Create(dir, WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for j := range imgs {
		if err := w.Write(&imgs[j]); err != nil {
			b.Fatal(err)
		}
	}
	m, err := w.Close(nil)
	if err != nil {
		b.Fatal(err)
	}
	set, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B) {
		secs := b.Elapsed().Seconds()
		b.ReportMetric(float64(m.Rows*int64(b.N))/secs, "images/s")
		b.ReportMetric(float64(m.Bytes*int64(b.N))/1e6/secs, "MB/s")
	}
	ctx := context.Background()
	b.Run("batches", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := set.Batches(ctx, ReadOptions{}, func(int, int64, arrow.RecordBatch) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("images", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := set.Images(ctx, ReadOptions{}, func(*Image) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("baseline-read-file", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for s := range m.Shards {
				if _, err := os.ReadFile(set.Path(s)); err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})
}
