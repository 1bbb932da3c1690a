package pipeline

import (
	"context"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
)

// predecoded returns rows as a pre-decoding conversion stores them: the
// decoder's own pixels, halved by 2×2 means when half is set (with the
// polygons scaled and the source size kept), encoded as format.
func predecoded(t testing.TB, rows []shard.Image, format string, half bool) []shard.Image {
	t.Helper()
	var e shard.PixelEncoder
	out := make([]shard.Image, len(rows))
	for i, r := range rows {
		im, err := decodeImage(r.Format, r.Bytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		pix, w, h := im.Pix, im.W, im.H
		o := r
		o.SourceWidth, o.SourceHeight = r.Width, r.Height
		o.Instances = append([]shard.Instance{}, r.Instances...)
		if half {
			w, h = im.W/2, im.H/2
			pix = make([]byte, 3*w*h)
			for y := 0; y < h; y++ {
				for x := 0; x < w; x++ {
					for c := 0; c < 3; c++ {
						s := 0
						for _, d := range [4][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
							s += int(im.Pix[3*((2*y+d[1])*im.W+2*x+d[0])+c])
						}
						pix[3*(y*w+x)+c] = uint8((s + 2) / 4)
					}
				}
			}
			for k := range o.Instances {
				in := &o.Instances[k]
				polys := make([][]float32, len(in.Polygons))
				for j, ring := range in.Polygons {
					for _, v := range ring {
						polys[j] = append(polys[j], v/2)
					}
				}
				in.Polygons = polys
			}
		}
		o.Width, o.Height, o.Format = int32(w), int32(h), format
		if o.Bytes, err = e.Encode(format, pix, o.Width, o.Height, nil); err != nil {
			t.Fatal(err)
		}
		out[i] = o
	}
	return out
}

// Rows pre-decoded at their own size hold the decoder's pixels, so every
// batch is the one the encoded rows give, augmentations included.
func TestPredecodedRowsGiveTheSameBatches(t *testing.T) {
	rows := synth(t, 20, 3)
	cfg := testConfig()
	want := run(t, &SliceSource{Rows: rows, BlockSize: 8}, cfg, 0)
	defer want.release()
	for _, format := range []string{shard.FormatRaw, shard.FormatZstd} {
		got := run(t, &SliceSource{Rows: predecoded(t, rows, format, false), BlockSize: 8}, cfg, 0)
		equalRuns(t, want.recs, got.recs)
		got.release()
	}
}

// A row shrunk at conversion maps back to its source image: the batch
// carries the source size and a transform from source pixels to the
// canvas, so predictions inverted through it land in the source frame.
func TestShrunkRowsMapBackToTheSource(t *testing.T) {
	rows := synth(t, 12, 0)
	cfg := testConfig()
	cfg.Val, cfg.Epochs = true, 1
	full := run(t, &SliceSource{Rows: rows}, cfg, 0)
	defer full.release()
	half := run(t, &SliceSource{Rows: predecoded(t, rows, shard.FormatZstd, true)}, cfg, 0)
	defer half.release()
	if len(full.recs) != len(half.recs) {
		t.Fatalf("%d batches, want %d", len(half.recs), len(full.recs))
	}
	for b := range full.recs {
		fi, hi := imagesOf(t, full.recs[b]), imagesOf(t, half.recs[b])
		fb, hb := boxesOf(t, full.recs[b]), boxesOf(t, half.recs[b])
		for i := range fi {
			if fi[i].ID != hi[i].ID || fi[i].OrigW != hi[i].OrigW || fi[i].OrigH != hi[i].OrigH {
				t.Fatalf("batch %d image %d: %+v, want the source's %+v", b, i, hi[i], fi[i])
			}
			for k := range fi[i].Transform {
				if math.Abs(fi[i].Transform[k]-hi[i].Transform[k]) > 1e-9 {
					t.Fatalf("image %d: transform %v, want %v", fi[i].ID, hi[i].Transform, fi[i].Transform)
				}
			}
		}
		if len(fb) != len(hb) {
			t.Fatalf("batch %d: %d boxes, want %d", b, len(hb), len(fb))
		}
		for k := range fb {
			if math.Abs(float64(fb[k]-hb[k])) > 1e-3 {
				t.Fatalf("batch %d box value %d: %v, want %v", b, k, hb[k], fb[k])
			}
		}
	}
}

func imagesOf(t *testing.T, rec arrow.RecordBatch) []batch.Image {
	t.Helper()
	im, err := batch.ImagesOf(rec)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

func boxesOf(t *testing.T, rec arrow.RecordBatch) []float32 {
	t.Helper()
	in, err := batch.InstancesOf(rec)
	if err != nil {
		t.Fatal(err)
	}
	return in.Boxes
}

// Damaged pre-decoded rows are skipped and counted like a JPEG that does
// not decode; the run delivers the rest.
func TestDamagedPredecodedRowsAreSkipped(t *testing.T) {
	rows := predecoded(t, synth(t, 10, 0), shard.FormatZstd, false)
	rows[2].Bytes = rows[2].Bytes[:len(rows[2].Bytes)/2] // truncated frame
	rows[5].Bytes = append([]byte{}, rows[5].Bytes...)
	rows[5].Bytes[len(rows[5].Bytes)/2] ^= 0x5a // flipped inside
	rows[7].Width++                             // the frame is not this size
	raw := predecoded(t, synth(t, 2, 0), shard.FormatRaw, false)
	raw[1].Bytes = raw[1].Bytes[:10]
	cfg := testConfig()
	cfg.Val, cfg.Epochs = true, 1
	l, err := New(context.Background(), &SliceSource{Rows: append(rows, raw...)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var n int64
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n += rec.NumRows()
		rec.Release()
	}
	if st := l.Stats(); st.Skipped["decode"] != 4 || n != 8 {
		t.Errorf("skipped %v, delivered %d; want decode=4 and 8", st.Skipped, n)
	}
}

func TestDecodeRowIntoTheCacheBuffer(t *testing.T) {
	for _, format := range []string{shard.FormatRaw, shard.FormatZstd} {
		row := predecoded(t, synth(t, 1, 0), format, false)[0]
		buf := make([]byte, shard.PixelBytes(row.Width, row.Height))
		allocs := testing.AllocsPerRun(20, func() {
			im, err := decodeRow(&row, buf)
			if err != nil || &im.Pix[0] != &buf[0] {
				t.Fatalf("%s: %v, or pixels outside the buffer", format, err)
			}
		})
		if allocs != 0 && !raceEnabled {
			t.Errorf("%s: %.1f allocations a decode, want 0", format, allocs)
		}
	}
}

// BenchmarkDecodeRow compares one image's decode from its JPEG with the
// copy or inflate of its pre-decoded forms (the JPEG is the baseline).
func BenchmarkDecodeRow(b *testing.B) {
	src := synth(b, 1, 0)
	for _, format := range []string{"jpeg", shard.FormatRaw, shard.FormatZstd} {
		row := src[0]
		if format != "jpeg" {
			row = predecoded(b, src, format, false)[0]
		}
		buf := make([]byte, shard.PixelBytes(row.Width, row.Height))
		b.Run(format, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeRow(&row, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
