package shard

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// noisePNG is a w×h PNG of random pixels: no two are alike, so each can
// be found in a shard's bytes.
func noisePNG(t *testing.T, rng *rand.Rand, w, h int) []byte {
	t.Helper()
	im := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range im.Pix {
		im.Pix[i] = byte(rng.Uint32())
	}
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngDecode is a VerifyOptions.Decode over image/png that records its calls.
func pngDecode(calls *int) func(string, []byte, int32, int32) error {
	return func(format string, data []byte, w, h int32) error {
		*calls++
		im, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			return err
		}
		if b := im.Bounds(); b.Dx() != int(w) || b.Dy() != int(h) {
			return fmt.Errorf("decoded %dx%d", b.Dx(), b.Dy())
		}
		return nil
	}
}

// Issue 35: with a stale sha256, verify reported "sha256" alone, not the
// 20 images with a bad crc32c inside; and it called an undecodable image
// with a correct crc "ok". Every problem is listed, located by shard, row,
// image id and reason, in every case.
func TestVerifyWithListsEveryBadImage(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	good := func(n int) []Image {
		rows := make([]Image, n)
		for i := range rows {
			rows[i] = Image{ImageID: int64(500 + i), FileName: fmt.Sprint(i, ".png"), Width: 8, Height: 6, Format: "png", Bytes: noisePNG(t, rng, 8, 6)}
		}
		return rows
	}
	type want struct {
		row    int64
		id     int64
		reason string
	}
	for _, tc := range []struct {
		name  string
		rows  func() []Image
		flip  []int // rows whose bytes are flipped in the file (sha256 left stale)
		trunc bool  // the file cut to half its size
		want  []want
		// decoded: images decoded without a problem.
		decoded int64
	}{
		{name: "intact", rows: func() []Image { return good(30) }, decoded: 30},
		{name: "stale sha256 and 20 bad crc32c", rows: func() []Image { return good(30) },
			flip: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19},
			want: func() []want {
				w := []want{{-1, -1, VerifySHA256}}
				for r := range 20 {
					w = append(w, want{int64(r), int64(500 + r), VerifyChecksum})
				}
				return w
			}(), decoded: 10},
		{name: "undecodable with a correct crc32c", rows: func() []Image {
			rows := good(5)
			rows[3].Bytes = append(rows[3].Bytes[:33], rows[3].Bytes[len(rows[3].Bytes)-12:]...) // IHDR, then IEND: no data
			return rows
		}, want: []want{{3, 503, VerifyDecode}}, decoded: 4},
		{name: "header over the pixel bound", rows: func() []Image {
			rows := good(3)
			rows[1].Width, rows[1].Height, rows[1].Bytes = 65535, 65535, testimg.PNGHeader(65535, 65535, 16, 6)
			return rows
		}, want: []want{{1, 501, VerifyTooLarge}}, decoded: 2},
		{name: "header lies about the row's size", rows: func() []Image {
			rows := good(3)
			rows[2].Width = 9
			return rows
		}, want: []want{{2, 502, VerifyHeader}}, decoded: 2},
		{name: "truncated shard", rows: func() []Image { return good(30) }, trunc: true,
			want: []want{{-1, -1, VerifySize}, {-1, -1, VerifyUnreadable}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rows := tc.rows()
			m := writeRows(t, dir, WriterOptions{ShardBytes: 1 << 20, RowGroupBytes: 2 << 10}, rows)
			if len(m.Shards) != 1 {
				t.Fatalf("%d shards, want 1", len(m.Shards))
			}
			path := filepath.Join(dir, m.Shards[0].File)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.flip {
				at := bytes.Index(b, rows[r].Bytes)
				if at < 0 {
					t.Fatalf("row %d's image not found in the shard", r)
				}
				b[at+len(rows[r].Bytes)/2] ^= 0x5a
			}
			if tc.trunc {
				b = b[:len(b)/2]
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			set, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			var calls int
			rep, err := set.VerifyWith(context.Background(), VerifyOptions{Decode: pngDecode(&calls)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(rep.Problems), len(tc.want), rep.Err())
			}
			for i, w := range tc.want {
				p := rep.Problems[i]
				if p.Shard != m.Shards[0].File || p.Row != w.row || p.ImageID != w.id || p.Reason != w.reason || p.Detail == "" {
					t.Errorf("problem %d: %+v, want row %d image %d %s", i, p, w.row, w.id, w.reason)
				}
			}
			if !rep.Decodes || rep.Decoded != tc.decoded {
				t.Errorf("decodes %v, decoded %d; want %d", rep.Decodes, rep.Decoded, tc.decoded)
			}
			// The decoder never meets an image over the bound, nor one
			// whose bytes failed their checksum.
			wantCalls := tc.decoded
			for _, w := range tc.want {
				if w.reason == VerifyDecode {
					wantCalls++
				}
			}
			if int64(calls) != wantCalls {
				t.Errorf("Decode called %d times, want %d", calls, wantCalls)
			}
			// Verify (no decoder) still sees what needs no decode.
			if err := set.Verify(context.Background()); (err == nil) != (len(tc.want) == 0 || tc.want[0].reason == VerifyDecode || tc.want[0].reason == VerifyHeader) {
				t.Errorf("Verify = %v", err)
			}
		})
	}
}

// The pixel bound is checked on every row, decoder or not, and a lowered
// one is honoured.
func TestVerifyPixelBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 2))
	rows := []Image{{ImageID: 1, Width: 8, Height: 6, Format: "png", Bytes: noisePNG(t, rng, 8, 6)}}
	dir := t.TempDir()
	writeRows(t, dir, WriterOptions{}, rows)
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  int64
		want int
	}{{0, 0}, {imagehdr.MaxPixels, 0}, {48, 0}, {47, 1}} {
		rep, err := set.VerifyWith(context.Background(), VerifyOptions{MaxPixels: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != tc.want || tc.want > 0 && rep.Problems[0].Reason != VerifyTooLarge {
			t.Errorf("MaxPixels %d: %v, want %d problems", tc.max, rep.Err(), tc.want)
		}
		if rep.Decodes || rep.Decoded != 0 || rep.Rows != 1 {
			t.Errorf("without Decode: %+v", rep)
		}
	}
}
