package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/formats/shard"
)

func TestConvertPixelsFlags(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 12)
	base := []string{"convert", "coco", "--annotations", ann, "--images", imgs}
	for _, c := range []struct {
		extra []string
		msg   string
	}{
		{[]string{"--pixels", "webp"}, "want jpeg, raw or zstd"},
		{[]string{"--max-side", "20"}, "--max-side needs --pixels raw or zstd"},
		{[]string{"--pixels", "raw", "--max-side", "-1"}, "--max-side -1"},
	} {
		code, _, errs := run(t, append(append(base, "--out", filepath.Join(tmp, "bad")), c.extra...)...)
		if code != ExitUsage || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d: %s", c.extra, code, errs)
		}
	}

	out := filepath.Join(tmp, "raw")
	code, stdout, errs := run(t, append(base, "--out", out, "--pixels", "raw", "--max-side", "20", "--shard-size", "4KiB")...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "pixels: raw, long side at most 20 (area resampling)") {
		t.Errorf("summary does not name the pixels:\n%s", stdout)
	}
	set, err := shard.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if m := set.Manifest; m.FormatVersion != 3 || m.Pixels == nil || m.Pixels.MaxSide != 20 || len(m.Shards) < 2 {
		t.Fatalf("manifest version %d pixels %+v, %d shards", m.FormatVersion, m.Pixels, len(m.Shards))
	}
	n := 0
	err = set.Images(context.Background(), shard.ReadOptions{}, func(img *shard.Image) error {
		f, err := os.Open(filepath.Join(imgs, img.FileName))
		if err != nil {
			return err
		}
		defer f.Close()
		src, err := png.Decode(f)
		if err != nil {
			return err
		}
		b := src.Bounds()
		if img.SourceWidth != int32(b.Dx()) || img.SourceHeight != int32(b.Dy()) || img.Width != 20 ||
			int64(len(img.Bytes)) != shard.PixelBytes(img.Width, img.Height) {
			t.Errorf("image %d: stored %dx%d (%d bytes) from %dx%d; source %v", img.ImageID, img.Width, img.Height,
				len(img.Bytes), img.SourceWidth, img.SourceHeight, b)
		}
		sx := float32(img.Width) / float32(img.SourceWidth)
		for _, in := range img.Instances {
			if !in.IsCrowd && (in.BBox[0] < 1.5*sx-1e-3 || in.BBox[0] > 1.5*sx+1e-3) {
				t.Errorf("image %d ann %d: box %v not scaled by %v", img.ImageID, in.AnnID, in.BBox, sx)
			}
		}
		n++
		return nil
	})
	if err != nil || n != 12 {
		t.Fatalf("%d rows: %v", n, err)
	}
	code, stdout, errs = run(t, "inspect", out, "--verify")
	if code != ExitOK || !strings.Contains(stdout, "pixels: pre-decoded raw") || !strings.Contains(stdout, "pixels decode") ||
		!strings.Contains(stdout, "source_width") {
		t.Errorf("inspect --verify: exit %d\n%s%s", code, stdout, errs)
	}
	// A resume with other pixel flags is another conversion.
	if code, _, errs := run(t, append(base, "--out", out, "--pixels", "zstd", "--max-side", "20", "--shard-size", "4KiB", "--resume")...); code == ExitOK ||
		!strings.Contains(errs, "other options") {
		t.Errorf("resume with --pixels zstd: exit %d: %s", code, errs)
	}
	// The default stays the version 2 layout of the files' own bytes.
	jp := filepath.Join(tmp, "jpeg")
	if code, _, errs := run(t, append(base, "--out", jp)...); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(jp, shard.ManifestName))
	if err != nil || strings.Contains(string(b), "pixels") || !strings.Contains(string(b), `"format_version": 2`) {
		t.Errorf("default manifest:\n%s", b)
	}
}

// A file whose header reads but whose body does not decode fails a
// pre-decoding conversion with the file named, rather than being dropped.
func TestConvertPixelsNamesAnUndecodableImage(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 3)
	p := filepath.Join(imgs, "img001.png")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The compressed data damaged, its chunk's CRC recomputed: the file's
	// structure is sound (convert's check at open passes it, as it passes
	// the header), and only decoding fails. A truncated file is refused at
	// open instead (corrupt_image).
	idat := bytes.Index(b, []byte("IDAT"))
	n := int(binary.BigEndian.Uint32(b[idat-4:]))
	for k := idat + 4 + 2; k < idat+4+n; k++ {
		b[k] ^= 0xff
	}
	binary.BigEndian.PutUint32(b[idat+4+n:], crc32.ChecksumIEEE(b[idat:idat+4+n]))
	if _, err := png.DecodeConfig(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, "convert", "coco", "--annotations", ann, "--images", imgs, "--out", filepath.Join(tmp, "z"), "--pixels", "zstd")
	if code == ExitOK || !strings.Contains(errs, "img001.png") || !strings.Contains(errs, "pre-decode") {
		t.Errorf("exit %d: %s", code, errs)
	}
}

// An interrupted pre-decoding conversion resumes to the uninterrupted
// bytes, like a JPEG one.
func TestConvertPixelsResumes(t *testing.T) {
	tmp := t.TempDir()
	ann, imgs := writeMiniCOCO(t, tmp, 16)
	flags := []string{"--shard-size", "8KiB", "--pixels", "zstd", "--max-side", "24"}
	args := func(out string, extra ...string) []string {
		return append(append([]string{"convert", "coco", "--annotations", ann, "--images", imgs, "--out", out}, flags...), extra...)
	}
	ref := filepath.Join(tmp, "ref")
	if code, _, errs := run(t, args(ref)...); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := dirFiles(t, ref)
	if len(want) < 3 {
		t.Fatalf("want several shards, got %d files", len(want))
	}
	px := &shard.Pixels{Encoding: shard.FormatZstd, MaxSide: 24, Resample: shard.ResampleArea}
	src, err := coco.Open(ann, imgs, coco.Options{Pixels: px})
	if err != nil {
		t.Fatal(err)
	}
	desc := shard.Source{Kind: "coco", Args: map[string]string{"annotations": filepath.Clean(ann), "images": filepath.Clean(imgs)}}
	out := filepath.Join(tmp, "resumed")
	o := convertOpts{out: out, shardSize: 8 << 10, pixels: px}
	if _, err := writeShards(context.Background(), &bytes.Buffer{}, failingSource{src, 11}, desc, o); !errors.Is(err, errInjected) {
		t.Fatalf("err %v, want the injected failure", err)
	}
	code, stdout, errs := run(t, args(out, "--resume")...)
	if code != ExitOK || !strings.Contains(stdout, "already in finished shards") {
		t.Fatalf("resume: exit %d\n%s%s", code, stdout, errs)
	}
	sameDirs(t, "resumed zstd conversion", want, dirFiles(t, out))
}
