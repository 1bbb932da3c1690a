package shard

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pixelImages turns testImages into pre-decoded rows of small sizes,
// their pixels smooth enough for zstd to shrink.
func pixelImages(t testing.TB, seed uint64, n int, format string) []Image {
	t.Helper()
	rows := testImages(seed, n)
	var e PixelEncoder
	for i := range rows {
		w, h := int32(3+i%9), int32(2+i%5)
		pix := make([]byte, PixelBytes(w, h))
		for k := range pix {
			pix[k] = byte(k/7 + i)
		}
		b, err := e.Encode(format, pix, w, h, nil)
		if err != nil {
			t.Fatal(err)
		}
		rows[i].Width, rows[i].Height, rows[i].Format, rows[i].Bytes = w, h, format, b
		rows[i].SourceWidth, rows[i].SourceHeight = 10*w, 10*h
		for k := range rows[i].Instances {
			if rows[i].Instances[k].RLE != nil {
				rows[i].Instances[k].RLE = &RLE{Height: h, Width: w, Counts: []uint32{uint32(w * h)}}
			}
		}
	}
	return rows
}

// writeRows writes rows as a whole conversion into dir.
func writeRows(t testing.TB, dir string, opts WriterOptions, rows []Image) *Manifest {
	t.Helper()
	w, err := Create(dir, opts)
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

func TestPixelsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var e PixelEncoder
	for _, format := range []string{FormatRaw, FormatZstd} {
		for trial := 0; trial < 20; trial++ {
			w, h := int32(1+rng.IntN(50)), int32(1+rng.IntN(50))
			pix := make([]byte, PixelBytes(w, h))
			for k := range pix {
				pix[k] = byte(rng.IntN(4) + k%13)
			}
			b, err := e.Encode(format, pix, w, h, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Into a buffer large enough: its memory, no allocation.
			buf := make([]byte, 0, len(pix)+10)
			got, err := DecodePixels(format, w, h, b, buf)
			if err != nil || !bytes.Equal(got, pix) {
				t.Fatalf("%s %dx%d: %v", format, w, h, err)
			}
			if &got[0] != &buf[:1][0] {
				t.Errorf("%s: decoded outside the given buffer", format)
			}
			// Into one too small: a new slice.
			if got, err := DecodePixels(format, w, h, b, make([]byte, 1)); err != nil || !bytes.Equal(got, pix) {
				t.Fatalf("%s small buffer: %v", format, err)
			}
		}
	}
}

func TestDecodePixelsRefusesWrongSizes(t *testing.T) {
	var e PixelEncoder
	pix := make([]byte, PixelBytes(4, 3))
	z, _ := e.Encode(FormatZstd, pix, 4, 3, nil)
	z2 := append(append([]byte{}, z...), z...) // two frames
	flipped := append([]byte{}, z...)
	flipped[len(flipped)-2] ^= 0xff // the content checksum
	for _, c := range []struct {
		name, format string
		w, h         int32
		b            []byte
	}{
		{"raw short", FormatRaw, 4, 3, pix[:35]},
		{"raw long", FormatRaw, 4, 3, append(pix, 0)},
		{"raw other size", FormatRaw, 3, 4, pix[:33]},
		{"zstd other size", FormatZstd, 3, 5, z},
		{"zstd two frames", FormatZstd, 4, 3, z2},
		{"zstd truncated", FormatZstd, 4, 3, z[:len(z)-3]},
		{"zstd checksum", FormatZstd, 4, 3, flipped},
		{"zstd garbage", FormatZstd, 4, 3, []byte("not a frame at all")},
		{"zstd empty", FormatZstd, 4, 3, nil},
		{"no size", FormatRaw, 0, 3, nil},
		{"huge", FormatRaw, 1 << 30, 1 << 30, nil},
		{"jpeg", FormatJPEG, 4, 3, pix},
	} {
		if _, err := DecodePixels(c.format, c.w, c.h, c.b, nil); !errors.Is(err, ErrPixels) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// FuzzDecodePixels: any bytes for any size give the pixels or an
// ErrPixels error, never a panic or an allocation beyond the size.
//
//	go test ./formats/shard -run '^$' -fuzz FuzzDecodePixels -fuzztime 1m
func FuzzDecodePixels(f *testing.F) {
	var e PixelEncoder
	pix := make([]byte, PixelBytes(5, 4))
	for i := range pix {
		pix[i] = byte(i * 3)
	}
	z, _ := e.Encode(FormatZstd, pix, 5, 4, nil)
	f.Add(true, int32(5), int32(4), z)
	f.Add(false, int32(5), int32(4), pix)
	f.Add(true, int32(1), int32(1), []byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, zst bool, w, h int32, b []byte) {
		format := FormatRaw
		if zst {
			format = FormatZstd
		}
		if PixelBytes(w, h) > 1<<20 {
			return // the size bound is tested above; keep the fuzzer fast
		}
		out, err := DecodePixels(format, w, h, b, nil)
		if err != nil {
			if !errors.Is(err, ErrPixels) {
				t.Fatalf("error not wrapping ErrPixels: %v", err)
			}
			return
		}
		if int64(len(out)) != PixelBytes(w, h) {
			t.Fatalf("%d bytes for %dx%d", len(out), w, h)
		}
	})
}

func TestWriterWritesPixelsAsVersion3(t *testing.T) {
	for _, format := range []string{FormatRaw, FormatZstd} {
		rows := pixelImages(t, 5, 9, format)
		dir := t.TempDir()
		opts := testOpts
		opts.Pixels = &Pixels{Encoding: format, MaxSide: 16, Resample: ResampleArea}
		m := writeRows(t, dir, opts, rows)
		if m.FormatVersion != 3 || m.Pixels == nil || *m.Pixels != *opts.Pixels {
			t.Fatalf("manifest version %d pixels %+v", m.FormatVersion, m.Pixels)
		}
		b, _ := os.ReadFile(filepath.Join(dir, ManifestName))
		if !strings.Contains(string(b), `"encoding": "`+format+`"`) {
			t.Errorf("manifest.json does not record the pixels:\n%s", b)
		}
		set, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Verify(context.Background()); err != nil {
			t.Fatal(err)
		}
		i := 0
		err = set.Images(context.Background(), ReadOptions{}, func(img *Image) error {
			want := rows[i]
			if img.SourceWidth != want.SourceWidth || img.SourceHeight != want.SourceHeight ||
				img.Width != want.Width || img.Format != format || !bytes.Equal(img.Bytes, want.Bytes) {
				t.Errorf("row %d: %dx%d from %dx%d %s", i, img.Width, img.Height, img.SourceWidth, img.SourceHeight, img.Format)
			}
			i++
			return nil
		})
		if err != nil || i != len(rows) {
			t.Fatalf("%d rows: %v", i, err)
		}
		r, err := set.OpenShard(0, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Version() != 3 || r.Schema().NumFields() != colSourceHeight+1 {
			t.Errorf("shard version %d with %d columns", r.Version(), r.Schema().NumFields())
		}
		r.Close()
	}
}

func TestWriterRefusesRowsOfTheOtherKind(t *testing.T) {
	px := pixelImages(t, 6, 2, FormatRaw)
	enc := testImages(6, 2)
	w, err := Create(t.TempDir(), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&px[0]); err == nil || !strings.Contains(err.Error(), "need WriterOptions.Pixels") {
		t.Errorf("raw row into a jpeg conversion: %v", err)
	}
	w.Abort()
	opts := testOpts
	opts.Pixels = &Pixels{Encoding: FormatRaw, MaxSide: 3, Resample: ResampleArea}
	w, err = Create(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.Write(&enc[0]); err == nil {
		t.Error("a jpeg row into a raw conversion was accepted")
	}
	if err := w.Write(&px[1]); err == nil || !strings.Contains(err.Error(), "max side") {
		t.Errorf("a row over the max side: %v", err)
	}
	bad := px[0]
	bad.Bytes = bad.Bytes[1:]
	if err := w.Write(&bad); err == nil {
		t.Error("raw bytes of the wrong size were accepted")
	}
	for _, p := range []Pixels{{Encoding: "jpeg"}, {Encoding: FormatZstd, MaxSide: -1}, {Encoding: FormatZstd, MaxSide: 9, Resample: "cubic"}} {
		o := testOpts
		o.Pixels = &p
		if _, err := Create(t.TempDir(), o); err == nil {
			t.Errorf("pixels %+v accepted", p)
		}
	}
}

func TestVerifyFindsPixelsThatDoNotFit(t *testing.T) {
	rows := pixelImages(t, 7, 4, FormatZstd)
	// A frame of another size, with a valid crc32c: only decoding it
	// shows the damage.
	var e PixelEncoder
	rows[2].Bytes, _ = e.Encode(FormatZstd, make([]byte, PixelBytes(2, 2)), 2, 2, nil)
	dir := t.TempDir()
	opts := testOpts
	opts.Pixels = &Pixels{Encoding: FormatZstd}
	writeRows(t, dir, opts, rows)
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = set.Verify(context.Background())
	if !errors.Is(err, ErrPixels) || !strings.Contains(err.Error(), "row 2") {
		t.Errorf("verify: %v", err)
	}
}

func TestManifestPixelsNeedVersion3(t *testing.T) {
	m := Manifest{FormatVersion: 2, Pixels: &Pixels{Encoding: FormatRaw}, Skipped: map[string]int64{}}
	if err := m.check(); err == nil {
		t.Error("pixels in a version 2 manifest accepted")
	}
	m.FormatVersion = 3
	if err := m.check(); err != nil {
		t.Error(err)
	}
	m.FormatVersion = FormatVersion + 1
	if err := m.check(); err == nil || !strings.Contains(err.Error(), "this segpipe reads versions 1 to 3") {
		t.Errorf("newer version: %v", err)
	}
}
