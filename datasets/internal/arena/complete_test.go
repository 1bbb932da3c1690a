package arena

import (
	"bytes"
	"errors"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// cocoTiny returns the shared coco-tiny images, or skips.
func cocoTiny(tb testing.TB) [][]byte {
	tb.Helper()
	paths, _ := filepath.Glob("/work/shared/data/coco-tiny/*2017/*.jpg")
	if len(paths) == 0 {
		tb.Skip("coco-tiny not present")
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestCheckCompleteRefusesTruncation(t *testing.T) {
	jpg, pngb := testimg.JPEG(40, 30), testimg.PNG(40, 30)
	flip := func(b []byte, at int) []byte { c := bytes.Clone(b); c[at] ^= 0x55; return c }
	// An APP1 segment holding a whole thumbnail, its own EOI included,
	// ahead of the frame: cutting the main scan must still be caught.
	thumb := append([]byte{0xff, 0xd8, 0xff, 0xe1, 0, 0}, testimg.JPEG(8, 8)...)
	thumb[4], thumb[5] = byte((len(thumb)-4)>>8), byte(len(thumb)-4)
	withThumb := append(thumb, jpg[2:]...)
	for _, tc := range []struct {
		name   string
		data   []byte
		format string
		ok     bool
	}{
		{"jpeg whole", jpg, "jpeg", true},
		{"jpeg with bytes after EOI", append(bytes.Clone(jpg), make([]byte, 3*tailWindow)...), "jpeg", true},
		{"jpeg cut in half", testimg.Half(jpg), "jpeg", false},
		{"jpeg without its last byte", jpg[:len(jpg)-1], "jpeg", false},
		{"jpeg cut in its header", jpg[:40], "jpeg", false},
		{"jpeg with a thumbnail, whole", withThumb, "jpeg", true},
		{"jpeg with a thumbnail, cut in half", withThumb[:len(withThumb)-len(jpg)/2], "jpeg", false},
		{"png whole", pngb, "png", true},
		{"png with bytes after IEND", append(bytes.Clone(pngb), "junk"...), "png", true},
		{"png cut in half", testimg.Half(pngb), "png", false},
		{"png without IEND", pngb[:len(pngb)-12], "png", false},
		{"png with a flipped data byte", flip(pngb, len(pngb)-20), "png", false},
		{"not a png", jpg, "png", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckComplete(bytes.NewReader(tc.data), int64(len(tc.data)), tc.format)
			if tc.ok && err != nil {
				t.Fatalf("refused a whole file: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrIncomplete) {
				t.Fatalf("CheckComplete = %v, want ErrIncomplete", err)
			}
			// Whatever it accepts, the standard decoder decodes.
			if _, _, derr := image.Decode(bytes.NewReader(tc.data)); tc.ok && derr != nil {
				t.Fatalf("accepted, but decoding fails: %v", derr)
			}
		})
	}
}

// Every real COCO image passes, and every one cut anywhere in its scan is
// refused.
func TestCheckCompleteOnCocoTiny(t *testing.T) {
	for i, b := range cocoTiny(t) {
		if err := CheckComplete(bytes.NewReader(b), int64(len(b)), "jpeg"); err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		for _, cut := range []int{len(b) / 2, len(b) - 2, len(b) - tailWindow - 1} {
			if err := CheckComplete(bytes.NewReader(b[:cut]), int64(cut), "jpeg"); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("image %d cut at %d of %d: %v", i, cut, len(b), err)
			}
		}
	}
}

func TestReadHeaderRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		data   []byte
		lim    Limits
		reason string // "" accepted
	}{
		{"valid jpeg", testimg.JPEG(32, 24), Limits{}, ""},
		{"valid png", testimg.PNG(32, 24), Limits{}, ""},
		{"65535² RGBA16 png", testimg.HugePNG(), Limits{}, datasets.ReasonImageTooLarge},
		{"16000² jpeg header over truncated data", testimg.JPEGClaiming(16000, 16000), Limits{}, datasets.ReasonImageTooLarge},
		{"over a lowered bound", testimg.JPEG(32, 24), Limits{MaxPixels: 32*24 - 1}, datasets.ReasonImageTooLarge},
		{"at a lowered bound", testimg.JPEG(32, 24), Limits{MaxPixels: 32 * 24}, ""},
		{"jpeg cut in half", testimg.Half(testimg.JPEG(64, 48)), Limits{}, datasets.ReasonCorruptImage},
		{"png cut in half", testimg.Half(testimg.PNG(64, 48)), Limits{}, datasets.ReasonCorruptImage},
		{"not an image", []byte("GIF89a"), Limits{}, datasets.ReasonCorruptImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "x")
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			h, err := ReadHeader(p, tc.lim)
			if tc.reason == "" {
				if err != nil || h.Size != int64(len(tc.data)) {
					t.Fatalf("ReadHeader = %+v, %v", h, err)
				}
				return
			}
			var he *HeaderError
			if !errors.As(err, &he) || he.Reason() != tc.reason {
				t.Fatalf("ReadHeader = %v, want a %s refusal", err, tc.reason)
			}
			if tc.reason == datasets.ReasonImageTooLarge && !errors.Is(err, imagehdr.ErrTooLarge) {
				t.Errorf("%v does not wrap imagehdr.ErrTooLarge", err)
			}
		})
	}
}

// FuzzCheckComplete: no panic on any bytes, and what it accepts as a
// JPEG or PNG whose header reads, the standard decoder decodes unless
// damage lies inside the data (which only a decode sees).
//
//	go test -run '^$' -fuzz FuzzCheckComplete -fuzztime 1m ./datasets/internal/arena
func FuzzCheckComplete(f *testing.F) {
	f.Add(testimg.JPEG(16, 16))
	f.Add(testimg.PNG(8, 8))
	f.Add(testimg.Half(testimg.JPEG(16, 16)))
	f.Add(testimg.HugePNG())
	f.Add(testimg.JPEGClaiming(16000, 16000))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, format := range []string{"jpeg", "png"} {
			_ = CheckComplete(bytes.NewReader(b), int64(len(b)), format)
		}
	})
}

// BenchmarkCheckComplete compares the structural check with the full
// decode it stands in for, on coco-tiny's JPEGs (in memory, so file I/O is
// left out of both): the figure per image is ns/op.
func BenchmarkCheckComplete(b *testing.B) {
	imgs := cocoTiny(b)
	b.Run("structural", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			d := imgs[i%len(imgs)]
			if err := CheckComplete(bytes.NewReader(d), int64(len(d)), "jpeg"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, err := image.Decode(bytes.NewReader(imgs[i%len(imgs)])); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadHeader is what opening a dataset pays a file, with the
// structural check, against reading the header alone (the cost before it),
// on coco-tiny's files.
func BenchmarkReadHeader(b *testing.B) {
	paths, _ := filepath.Glob("/work/shared/data/coco-tiny/*2017/*.jpg")
	if len(paths) == 0 {
		b.Skip("coco-tiny not present")
	}
	b.Run("header+check", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := ReadHeader(paths[i%len(paths)], Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("header only", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			f, err := os.Open(paths[i%len(paths)])
			if err != nil {
				b.Fatal(err)
			}
			_, err = imagehdr.ReadFrom(f)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
