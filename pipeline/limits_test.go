package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/imagehdr"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/internal/testenv/testimg"
)

// hostile returns a row whose image claims a size no loader may allocate.
func hostile(t testing.TB, id int64, kind string) shard.Image {
	row := shard.Image{ImageID: id, Width: 64, Height: 48, Format: shard.FormatPNG,
		Instances: []shard.Instance{{AnnID: id, Class: 1, Polygons: [][]float32{{4, 4, 40, 4, 40, 40}}}}}
	switch kind {
	case "png 65535² rgba16":
		row.Bytes = testimg.PNGHeader(65535, 65535, 16, 6)
	case "png 20000² rgb":
		row.Bytes = testimg.PNGHeader(20000, 20000, 8, 2)
	case "jpeg 16000² truncated":
		row.Format, row.Bytes = shard.FormatJPEG, testimg.JPEGClaiming(16000, 16000)
	case "raw 60000² stated":
		row.Format, row.Width, row.Height, row.Bytes = shard.FormatRaw, 60000, 60000, make([]byte, 30)
	case "png 3000² under MaxImagePixels 2^20":
		row.Bytes = testimg.PNGHeader(3000, 3000, 8, 2)
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	return row
}

func drain(t *testing.T, l *Loader) (images int64, err error) {
	t.Helper()
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			return images, err
		}
		images += rec.NumRows()
		rec.Release()
	}
	return images, nil
}

// Issue 35: a 74-byte PNG claiming 65,535² killed the process in
// png.Decode, a truncated JPEG claiming 16,000² made image/jpeg allocate
// its plane. Every image's size is checked before any pixel buffer
// exists; an image over the bound is skipped and counted, as a sample
// and as a mosaic partner, and Strict fails on it.
func TestOversizeImagesAreSkippedBeforeDecode(t *testing.T) {
	for _, kind := range []string{"png 65535² rgba16", "png 20000² rgb", "jpeg 16000² truncated",
		"raw 60000² stated", "png 3000² under MaxImagePixels 2^20"} {
		t.Run(kind, func(t *testing.T) {
			rows := synth(t, 12, 0)
			rows[3] = hostile(t, rows[3].ImageID, kind)
			rows[8] = hostile(t, rows[8].ImageID, kind)
			for _, tc := range []struct {
				name   string
				mosaic float64
				strict bool
			}{{"sample", 0, false}, {"partner", 1, false}, {"strict", 0, true}} {
				cfg := testConfig()
				cfg.Epochs, cfg.CloseMosaic, cfg.MaxImagePixels = 1, 0, 1<<20
				cfg.Augment.Mosaic, cfg.Strict = tc.mosaic, tc.strict
				l, err := New(context.Background(), &SliceSource{Rows: rows, BlockSize: 4}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				images, err := drain(t, l)
				st := l.Stats()
				l.Close()
				switch {
				case tc.strict:
					if !errors.Is(err, imagehdr.ErrTooLarge) || !strings.Contains(err.Error(), imagehdr.ReasonTooLarge) {
						t.Errorf("%s: strict run ended with %v, want an error naming %s", tc.name, err, imagehdr.ReasonTooLarge)
					}
				case err != nil:
					t.Fatalf("%s: %v", tc.name, err)
				case st.Skipped[imagehdr.ReasonTooLarge] != 2 || images != 10:
					t.Errorf("%s: skipped %v, delivered %d; want %s=2 and 10", tc.name, st.Skipped, images, imagehdr.ReasonTooLarge)
				case tc.mosaic > 0 && st.Skipped[PartnerPrefix+imagehdr.ReasonTooLarge] == 0:
					t.Errorf("%s: no partner counted in %v", tc.name, st.Skipped)
				}
			}
		})
	}
}

// The byte bound comes from the budget's headroom, the same at every
// worker count (batches stay identical); without a budget only pixels are
// bounded.
func TestImageBoundsFollowTheBudgetNotTheWorkers(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 12, 0), BlockSize: 4}
	base := testConfig()
	base.MaxMemory, base.CacheBytes = 1<<30, 64<<20
	want := base.defaults().limits(src)
	if want.imageBytes <= EstimateImageBytes || want.maskBytes <= 0 || want.maxPixels != imagehdr.MaxPixels {
		t.Fatalf("limits under a 1 GiB budget: %+v", want)
	}
	for _, workers := range []int{1, 2, 3, 16} {
		cfg := base
		cfg.Workers = workers
		if got := cfg.defaults().limits(src); !reflect.DeepEqual(got, want) {
			t.Errorf("%d workers: %+v, want %+v", workers, got, want)
		}
	}
	none := base
	none.MaxMemory = -1
	if got := none.defaults().limits(src); got.imageBytes != 0 || got.maskBytes != 0 {
		t.Errorf("no budget: %+v, want no byte bounds", got)
	}
	// An image within the pixels but over the bytes is refused by bytes.
	lim := limits{maxPixels: imagehdr.MaxPixels, imageBytes: 64 << 20}
	for _, tc := range []struct {
		row  shard.Image
		fits bool
	}{
		{shard.Image{Format: shard.FormatPNG, Bytes: testimg.PNGHeader(4000, 4000, 16, 6)}, false}, // 16 Mpx × 11 B
		{shard.Image{Format: shard.FormatPNG, Bytes: testimg.PNGHeader(2000, 2000, 8, 2)}, true},
		{shard.Image{Format: shard.FormatRaw, Width: 5000, Height: 5000}, false},
		{shard.Image{Format: shard.FormatRaw, Width: 4000, Height: 4000}, true},
	} {
		_, _, _, err := lim.imageSize(&tc.row)
		if (err == nil) != tc.fits || (err != nil && !errors.Is(err, imagehdr.ErrTooLarge)) {
			t.Errorf("%s %dx%d: %v, want fits=%v", tc.row.Format, tc.row.Width, tc.row.Height, err, tc.fits)
		}
	}
}

// Issue 35: a label file of 1,000,000 lines made the loader ask for a
// 51 GB mask buffer. A row over shard.MaxInstances is skipped whole
// before any label work, as a sample and as a mosaic partner.
func TestTooManyInstancesAreSkipped(t *testing.T) {
	rows := synth(t, 12, 0)
	many := make([]shard.Instance, shard.MaxInstances+1)
	for i := range many {
		many[i] = shard.Instance{AnnID: int64(i), Class: 1, Polygons: [][]float32{{4, 4, 20, 4, 20, 20}}}
	}
	rows[5].Instances = many
	fits := synth(t, 1, 0)[0]
	fits.ImageID = rows[6].ImageID
	fits.Instances = many[:shard.MaxInstances]
	rows[6] = fits
	for _, mosaic := range []float64{0, 1} {
		cfg := testConfig()
		cfg.Epochs, cfg.CloseMosaic, cfg.Augment.Mosaic = 1, 0, mosaic
		l, err := New(context.Background(), &SliceSource{Rows: rows, BlockSize: 4}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		images, err := drain(t, l)
		st := l.Stats()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Skipped[shard.ReasonTooManyInstances] != 1 || images != 11 {
			t.Errorf("mosaic %v: skipped %v, delivered %d; want %s=1 and 11", mosaic, st.Skipped, images, shard.ReasonTooManyInstances)
		}
		if mosaic > 0 && st.Skipped[PartnerPrefix+shard.ReasonTooManyInstances] == 0 {
			t.Errorf("mosaic: no partner counted in %v", st.Skipped)
		}
	}
}

// Under a budget a batch's masks are bounded: the samples with the most
// instances are left out (mask_budget) until the rest fit, the same ones
// at any worker count.
func TestBatchMasksStayWithinTheirShare(t *testing.T) {
	rows := synth(t, 12, 0)
	src := &SliceSource{Rows: rows, BlockSize: 4}
	cfg := testConfig()
	cfg.Val, cfg.Epochs, cfg.Stride, cfg.Prefetch = true, 1, 1, 2
	cfg.Workers = 3
	m, err := cfg.MemoryOf(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxMemory = Budget(m.Total())
	lim := cfg.defaults().limits(src)
	per := int64(64*64) + instanceColumnBytes
	// One heavy sample fits a batch, two do not.
	k := int(lim.maskBytes/per)/2 + 1
	if k > shard.MaxInstances || int64(k)*per > lim.maskBytes {
		t.Fatalf("bound %d bytes: no instance count fits once but not twice", lim.maskBytes)
	}
	heavy := make([]shard.Instance, k)
	for i := range heavy {
		heavy[i] = shard.Instance{AnnID: int64(i), Class: 1, Polygons: [][]float32{{4, 4, 30, 6, 20, 30}}}
	}
	for i := range rows {
		rows[i].Instances = heavy
	}
	var runs [][]int64
	for _, workers := range []int{1, 3} {
		c := cfg
		c.Workers = workers
		var maxBytes int64
		r := run(t, src, c, 0)
		var ids []int64
		for _, rec := range r.recs {
			maxBytes = max(maxBytes, int64(sumN(t, rec))*per)
			ids = append(ids, imageIDsOf(t, rec)...)
		}
		r.release()
		if maxBytes > lim.maskBytes {
			t.Errorf("%d workers: a batch holds %d mask bytes, over its bound %d", workers, maxBytes, lim.maskBytes)
		}
		if len(ids) != 2 { // one sample of each batch of 6
			t.Errorf("%d workers: delivered %v, want one image a batch", workers, ids)
		}
		runs = append(runs, ids)
	}
	if len(runs[0]) != len(runs[1]) || (len(runs[0]) > 0 && runs[0][0] != runs[1][0]) {
		t.Errorf("the kept samples depend on the worker count: %v vs %v", runs[0], runs[1])
	}
}

// Issue 35: a class index outside the set's categories passed bench and
// dump and stopped train. The instance is left out and counted per
// instance (bad_class); the sample is delivered. A source without
// categories keeps every class.
func TestBadClassInstancesAreDropped(t *testing.T) {
	rows := synth(t, 12, 0)
	rows[2].Instances[0].Class = 3  // nc is 3
	rows[7].Instances[1].Class = -1 // and negative
	dir := writeSet(t, rows)
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, tc := range []struct {
		name string
		src  Source
		bad  int64
	}{{"shard set with 3 categories", src, 2}, {"slice source without categories", &SliceSource{Rows: rows}, 0}} {
		cfg := testConfig()
		cfg.Val, cfg.Epochs = true, 1
		r := run(t, tc.src, cfg, 0)
		var n int64
		for _, rec := range r.recs {
			n += rec.NumRows()
			for _, c := range classesOf(t, rec) {
				if tc.bad > 0 && (c < 0 || c >= 3) {
					t.Errorf("%s: class %d delivered", tc.name, c)
				}
			}
		}
		r.release()
		l, _ := New(context.Background(), tc.src, cfg)
		drain(t, l)
		st := l.Stats()
		l.Close()
		if st.Skipped[SkipBadClass] != tc.bad || n != 12 {
			t.Errorf("%s: skipped %v, delivered %d; want %s=%d and 12", tc.name, st.Skipped, n, SkipBadClass, tc.bad)
		}
	}
}

// writeSet writes rows as a shard set of three categories.
func writeSet(t *testing.T, rows []shard.Image) string {
	dir, _ := writeSetManifest(t, rows)
	return dir
}

// writeSetManifest writes rows as a shard set of three categories, in
// shards of about 24 KiB and row groups of about 6 KiB, and returns its
// directory and manifest.
func writeSetManifest(t *testing.T, rows []shard.Image) (string, *shard.Manifest) {
	t.Helper()
	dir := t.TempDir()
	w, err := shard.Create(dir, shard.WriterOptions{ShardBytes: 24 << 10, RowGroupBytes: 6 << 10,
		Categories: []shard.Category{{ID: 1, Index: 0, Name: "a"}, {ID: 2, Index: 1, Name: "b"}, {ID: 3, Index: 2, Name: "c"}}})
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
	return dir, m
}

// Issue 35: a 0-row set made bench, serve and the Python loader succeed
// with nothing. Opening it, or starting a loader over any empty source,
// fails with ErrEmptySet naming it.
func TestEmptySetIsAnError(t *testing.T) {
	dir := writeSet(t, nil)
	if _, err := OpenShards(dir); !errors.Is(err, ErrEmptySet) || !strings.Contains(err.Error(), dir) {
		t.Errorf("OpenShards of a 0-row set: %v, want ErrEmptySet naming %s", err, dir)
	}
	if _, err := New(context.Background(), &SliceSource{}, testConfig()); !errors.Is(err, ErrEmptySet) {
		t.Errorf("New over an empty source: %v, want ErrEmptySet", err)
	}
}

// Issue 35: a missing shard file refused the whole set while a 0-byte one
// or a directory in its place was skipped. One rule: each is skipped and
// counted as bad_shard; a set where no shard opens fails at its epoch
// naming them.
func TestUnusableShardFilesAreSkipped(t *testing.T) {
	rows := synth(t, 60, 0)
	damage := map[string]func(path string) error{
		"missing":   os.Remove,
		"0 bytes":   func(p string) error { return os.Truncate(p, 0) },
		"directory": func(p string) error { return errors.Join(os.Remove(p), os.Mkdir(p, 0o755)) },
	}
	for _, name := range []string{"missing", "0 bytes", "directory"} {
		t.Run(name, func(t *testing.T) {
			dir := writeSet(t, rows)
			set, err := shard.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := set.Manifest
			if len(m.Shards) < 2 {
				t.Fatalf("%d shards, want several", len(m.Shards))
			}
			for _, all := range []bool{false, true} {
				for i := range m.Shards {
					p := filepath.Join(dir, m.Shards[i].File)
					if (i == 1 || all) && !isDamaged(p, name) {
						if err := damage[name](p); err != nil {
							t.Fatal(err)
						}
					}
				}
				src, err := OpenShards(dir)
				if err != nil {
					t.Fatalf("all=%v: a %s shard refused the set: %v", all, name, err)
				}
				cfg := testConfig()
				cfg.Val, cfg.Epochs = true, 1
				l, err := New(context.Background(), src, cfg)
				if err != nil {
					t.Fatal(err)
				}
				images, err := drain(t, l)
				st := l.Stats()
				l.Close()
				src.Close()
				if all {
					if err == nil || !strings.Contains(err.Error(), m.Shards[0].File) || !strings.Contains(err.Error(), SkipBadShard) {
						t.Errorf("every shard %s: %v, want an error naming the shards and %s", name, err, SkipBadShard)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if st.Skipped[SkipBadShard] != m.Shards[1].Rows || images != int64(len(rows))-m.Shards[1].Rows {
					t.Errorf("skipped %v, delivered %d; want %s=%d", st.Skipped, images, SkipBadShard, m.Shards[1].Rows)
				}
			}
		})
	}
}

func isDamaged(path, how string) bool {
	fi, err := os.Stat(path)
	switch how {
	case "missing":
		return err != nil
	case "0 bytes":
		return err == nil && fi.Size() == 0
	}
	return err == nil && fi.IsDir()
}

func columnsOf(t *testing.T, rec arrow.RecordBatch) batch.Columns {
	t.Helper()
	var c batch.Columns
	if err := batch.ColumnsOf(rec, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// sumN is a record's instance count.
func sumN(t *testing.T, rec arrow.RecordBatch) int {
	c := columnsOf(t, rec)
	return len(arrow.Int32Traits.CastFromBytes(c.Classes.Bytes()))
}

func imageIDsOf(t *testing.T, rec arrow.RecordBatch) []int64 {
	return slices.Clone(arrow.Int64Traits.CastFromBytes(columnsOf(t, rec).ImageIDs.Bytes()))
}

func classesOf(t *testing.T, rec arrow.RecordBatch) []int32 {
	return arrow.Int32Traits.CastFromBytes(columnsOf(t, rec).Classes.Bytes())
}
