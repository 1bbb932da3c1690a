package shard

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzShardFile feeds damaged shard files to the reader: every outcome
// must be a value or an error naming the file, never a panic or a hang.
//
//	go test ./formats/shard -run '^$' -fuzz FuzzShardFile -fuzztime 2m
func FuzzShardFile(f *testing.F) {
	dir := f.TempDir()
	w, err := Create(dir, WriterOptions{Categories: testOpts.Categories})
	if err != nil {
		f.Fatal(err)
	}
	imgs := testImages(11, 4)
	for i := range imgs {
		imgs[i].Bytes = imgs[i].Bytes[:64]
		if err := w.Write(&imgs[i]); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := w.Close(nil); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, ShardName(0)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("PAR1PAR1"))
	// A pre-decoded (version 3) shard: zstd frames of pixels.
	zdir := f.TempDir()
	writeRows(f, zdir, WriterOptions{Categories: testOpts.Categories, Pixels: &Pixels{Encoding: FormatZstd}},
		pixelImages(f, 12, 4, FormatZstd))
	zgood, err := os.ReadFile(filepath.Join(zdir, ShardName(0)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(zgood)
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "part-00000.parquet")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := OpenShardFile(path, ReadOptions{})
		if err != nil {
			return
		}
		defer r.Close()
		var d Decoder
		var img Image
		for g := 0; g < r.NumRowGroups(); g++ {
			rec, err := r.ReadRowGroup(context.Background(), g)
			if err != nil {
				continue
			}
			if err := d.Reset(rec); err == nil {
				for i := 0; i < d.Len(); i++ {
					if d.Decode(i, &img) == nil && Predecoded(img.Format) && PixelBytes(img.Width, img.Height) <= 1<<20 {
						_, _ = DecodePixels(img.Format, img.Width, img.Height, img.Bytes, nil)
					}
				}
			}
			rec.Release()
		}
	})
}

// FuzzReadManifest checks that any manifest.json is accepted or refused
// with an error, and that an accepted one survives a write/read cycle.
//
//	go test ./formats/shard -run '^$' -fuzz FuzzReadManifest -fuzztime 1m
func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(`{"format_version":1,"source":{"kind":"coco"},"categories":[{"id":1,"index":0,"name":"a"}],` +
		`"rows":2,"instances":3,"bytes":10,"shards":[{"file":"part-00000.parquet","rows":2,"instances":3,"bytes":10,"sha256":"ab"}],"skipped":{"x":1}}`))
	f.Add([]byte(`{"format_version":1}`))
	f.Add([]byte(`{"format_version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadManifest(dir)
		if err != nil {
			return
		}
		enc, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestName), enc, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(dir); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
	})
}
