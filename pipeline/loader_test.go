package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/augment"
	"github.com/segpipe/segpipe/pipeline/order"
)

// synth makes n small images, each a distinct background with a red
// quadrilateral and a green triangle annotated as polygons.
func synth(t testing.TB, n int, pngEvery int) []shard.Image {
	t.Helper()
	rows := make([]shard.Image, n)
	for i := range rows {
		w, h := 64+8*(i%3), 48+8*(i%2)
		if i%4 == 1 {
			w, h = h, w
		}
		im := image.NewRGBA(image.Rect(0, 0, w, h))
		bg := color.RGBA{uint8(20 + 3*i%60), uint8(30 + 7*i%50), uint8(90 + i%40), 255}
		quad := []float32{float32(4 + i%7), 6, float32(w - 10), 4, float32(w - 6), float32(h/2 + 3), 8, float32(h / 2)}
		tri := []float32{float32(w / 3), float32(h - 4), float32(w - 4), float32(h/2 + 6), float32(w - 8), float32(h - 3)}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				c := bg
				px, py := float64(x)+0.5, float64(y)+0.5
				if inside(quad, px, py) {
					c = color.RGBA{240, 10, 10, 255}
				} else if inside(tri, px, py) {
					c = color.RGBA{10, 230, 10, 255}
				}
				im.Set(x, y, c)
			}
		}
		var buf bytes.Buffer
		format := "jpeg"
		if pngEvery > 0 && i%pngEvery == 0 {
			format = "png"
			if err := png.Encode(&buf, im); err != nil {
				t.Fatal(err)
			}
		} else if err := jpeg.Encode(&buf, im, &jpeg.Options{Quality: 95}); err != nil {
			t.Fatal(err)
		}
		rows[i] = shard.Image{
			ImageID: int64(1000 + i), Width: int32(w), Height: int32(h), Format: format, Bytes: buf.Bytes(),
			Instances: []shard.Instance{
				{AnnID: int64(i), Class: 1, Polygons: [][]float32{quad}},
				{AnnID: int64(i) + 5000, Class: 2, Polygons: [][]float32{tri}},
			},
		}
	}
	return rows
}

func inside(ring []float32, px, py float64) bool {
	in := false
	n := len(ring) / 2
	for i, j := 0, n-1; i < n; j, i = i, i+1 {
		x0, y0, x1, y1 := float64(ring[2*j]), float64(ring[2*j+1]), float64(ring[2*i]), float64(ring[2*i+1])
		if (y0 > py) != (y1 > py) && px < x0+(py-y0)*(x1-x0)/(y1-y0) {
			in = !in
		}
	}
	return in
}

func testConfig() Config {
	a := augment.DefaultConfig()
	a.ImgSz = 64
	a.Degrees = 5
	return Config{BatchSize: 6, Augment: a, WindowRows: 16, Start: order.State{Seed: 11}, Epochs: 2, CloseMosaic: 1}
}

type result struct {
	recs   []arrow.RecordBatch
	states []order.State
}

func (r *result) release() {
	for _, rec := range r.recs {
		rec.Release()
	}
}

func run(t *testing.T, src Source, cfg Config, maxBatches int) result {
	t.Helper()
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var r result
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		r.recs = append(r.recs, rec)
		r.states = append(r.states, l.State())
		if len(r.recs) == maxBatches {
			break
		}
	}
	return r
}

func equalRuns(t *testing.T, a, b []arrow.RecordBatch) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d batches vs %d", len(a), len(b))
	}
	for i := range a {
		if !array.RecordEqual(a[i], b[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

func TestDeterministicAcrossWorkerCounts(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 40, 5), BlockSize: 8}
	cfg := testConfig()
	cfg.Workers = 1
	one := run(t, src, cfg, -1)
	defer one.release()
	cfg.Workers = 8
	cfg.Prefetch = 3
	eight := run(t, src, cfg, -1)
	defer eight.release()
	if len(one.recs) != 14 { // 40 rows → 7 batches an epoch, 2 epochs
		t.Fatalf("%d batches", len(one.recs))
	}
	equalRuns(t, one.recs, eight.recs)
	ms, _ := batch.MaskStack(one.recs[0])
	if ms.Count == 0 {
		t.Fatal("no instances in the first batch")
	}
}

func TestResumeReproducesTheRun(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 40, 0), BlockSize: 8}
	cfg := testConfig()
	cfg.Workers = 2
	full := run(t, src, cfg, -1)
	defer full.release()
	for _, k := range []int{1, 6, 7, 10} { // mid-epoch, end of epoch, next epoch
		c := cfg
		c.Workers = 3
		c.Start = full.states[k-1]
		rest := run(t, src, c, -1)
		equalRuns(t, full.recs[k:], rest.recs)
		rest.release()
	}
}

// sampleKeys identifies each row of a batch by its image bytes.
func sampleKeys(t *testing.T, recs []arrow.RecordBatch) []uint64 {
	var keys []uint64
	for _, rec := range recs {
		im, err := batch.ImageTensor(rec)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < im.Count; i++ {
			h := fnv.New64a()
			h.Write(im.At(i))
			keys = append(keys, h.Sum64())
		}
	}
	return keys
}

func TestRanksShareOneOrder(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 37, 0), BlockSize: 5}
	cfg := testConfig()
	cfg.Epochs = 1
	cfg.CloseMosaic = 0
	single := run(t, src, cfg, -1)
	want := sampleKeys(t, single.recs)
	single.release()
	slices.Sort(want)
	if len(want) != 37 || slices.Compact(slices.Clone(want)) == nil || len(slices.Compact(slices.Clone(want))) != 37 {
		t.Fatalf("W=1 yields %d samples", len(want))
	}
	for _, world := range []int{2, 3} {
		var got []uint64
		for r := 0; r < world; r++ {
			c := cfg
			c.Rank, c.WorldSize = r, world
			res := run(t, src, c, -1)
			got = append(got, sampleKeys(t, res.recs)...)
			res.release()
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("W=%d: union differs from W=1 (%d vs %d samples, duplicates count as differences)", world, len(got), len(want))
		}
	}
	// Elastic resume: two ranks take 2 steps each, then three ranks finish.
	var got []uint64
	var state order.State
	for r := 0; r < 2; r++ {
		c := cfg
		c.Rank, c.WorldSize = r, 2
		res := run(t, src, c, 2)
		got = append(got, sampleKeys(t, res.recs)...)
		state = res.states[1]
		res.release()
	}
	if state.Consumed != 2*6*2 {
		t.Fatalf("state after 2 steps of 2 ranks: %+v", state)
	}
	for r := 0; r < 3; r++ {
		c := cfg
		c.Rank, c.WorldSize, c.Start = r, 3, state
		res := run(t, src, c, -1)
		got = append(got, sampleKeys(t, res.recs)...)
		res.release()
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatal("W=2 then W=3 after resume: samples differ from W=1")
	}
}

func TestMasksAreWrittenInPlace(t *testing.T) {
	var mu sync.Mutex
	written := map[uintptr]bool{}
	rasterHook = func(m []byte) {
		mu.Lock()
		written[uintptr(unsafe.Pointer(unsafe.SliceData(m)))] = true
		mu.Unlock()
	}
	defer func() { rasterHook = nil }()
	src := &SliceSource{Rows: synth(t, 12, 0)}
	cfg := testConfig()
	cfg.Epochs = 1
	res := run(t, src, cfg, -1)
	defer res.release()
	for i, rec := range res.recs {
		ms, err := batch.MaskStack(rec)
		if err != nil {
			t.Fatal(err)
		}
		if ms.Count == 0 {
			continue
		}
		if !written[uintptr(unsafe.Pointer(&ms.Data[0]))] {
			t.Fatalf("batch %d: mask column at %p is not a buffer the rasteriser wrote", i, &ms.Data[0])
		}
	}
}

// TestMasksMatchPixels checks on every output image that mask cells (cell
// centre rule) whose 3×3 cell neighbourhood is ON show the instance colour.
func TestMasksMatchPixels(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 24, 3), BlockSize: 4}
	for _, val := range []bool{false, true} {
		cfg := testConfig()
		cfg.Val = val
		cfg.Epochs = 1
		cfg.Augment.HSVH, cfg.Augment.HSVS, cfg.Augment.HSVV = 0, 0, 0
		cfg.Stride = 1
		res := run(t, src, cfg, -1)
		checked := 0
		for _, rec := range res.recs {
			im, _ := batch.ImageTensor(rec)
			ms, _ := batch.MaskStack(rec)
			classes := rec.Column(rec.Schema().FieldIndices(batch.ColClasses)[0]).(*array.List).ListValues().(*array.Int32)
			s := 64
			for i := 0; i < im.Count; i++ {
				img := im.At(i)
				for k := ms.Offsets[i]; k < ms.Offsets[i+1]; k++ {
					m := ms.At(int(k))
					ch := 0 // red plane for class 1
					if classes.Value(int(k)) == 2 {
						ch = 1
					}
					for y := 1; y < s-1; y++ {
						for x := 1; x < s-1; x++ {
							if m[y*s+x] == 0 || m[y*s+x-1] == 0 || m[y*s+x+1] == 0 || m[(y-1)*s+x] == 0 || m[(y+1)*s+x] == 0 {
								continue
							}
							checked++
							if v := img[ch*s*s+y*s+x]; v < 128 {
								t.Fatalf("val=%v image %d instance %d: cell (%d,%d) ON but channel %d = %d", val, i, k, x, y, ch, v)
							}
						}
					}
				}
			}
		}
		res.release()
		if checked < 500 {
			t.Fatalf("val=%v: only %d cells checked", val, checked)
		}
	}
}

func TestCorruptImagesAreSkippedAndCounted(t *testing.T) {
	rows := synth(t, 20, 0)
	rows[3].Bytes = []byte("not a jpeg")
	rows[11].Bytes = rows[11].Bytes[:40] // truncated
	rows[15].Bytes = nil                 // bad row
	src := &SliceSource{Rows: rows, BlockSize: 4}
	cfg := testConfig()
	cfg.Epochs = 1
	cfg.Augment.Mosaic = 0
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l, err := New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n += int(rec.NumRows())
		rec.Release()
	}
	st := l.Stats()
	l.Close()
	if n != 17 || st.Skipped["decode"] != 2 || st.Skipped["bad_row"] != 1 {
		t.Fatalf("%d images, skipped %v", n, st.Skipped)
	}
	for _, want := range []string{"image_id=1003", "image_id=1011", "image_id=1015", "reason=decode", "reason=bad_row"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}

	cfg.Strict = true
	l, err = New(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, err = range l.All(context.Background()) {
		if err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("strict loader did not fail")
	}
}

func settle(base int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 100 && n > base; i++ {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// TestNoGoroutineLeaks counts goroutines (a settle loop rather than a
// dependency: the loader's goroutines all end inside Close's wait, so the
// count must return to the baseline) after full runs, early Close,
// cancellation and a failing source.
func TestNoGoroutineLeaks(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 30, 0), BlockSize: 4}
	base := runtime.NumGoroutine()
	cfg := testConfig()
	cfg.Workers = 4

	// Full run without calling Close: the stream ends by itself.
	l, _ := New(context.Background(), src, cfg)
	for rec, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if n := settle(base); n > base {
		t.Fatalf("after a full run: %d goroutines, baseline %d", n, base)
	}
	// Early Close with batches in flight.
	l, _ = New(context.Background(), src, cfg)
	rec, _ := l.Next(context.Background())
	rec.Release()
	l.Close()
	// Cancelled context while the consumer is slow.
	ctx, cancel := context.WithCancel(context.Background())
	l, _ = New(ctx, src, cfg)
	time.Sleep(20 * time.Millisecond)
	cancel()
	if _, err := l.Next(context.Background()); err == nil {
		// a batch may already be ready; the next one must fail
		if _, err := l.Next(context.Background()); !errors.Is(err, context.Canceled) && err != nil && err != io.EOF {
			t.Logf("after cancel: %v", err)
		}
	}
	l.Close()
	// Failing source.
	l, _ = New(context.Background(), failingSource{src}, cfg)
	for _, err := range l.All(context.Background()) {
		if err != nil {
			break
		}
	}
	l.Close()
	if n := settle(base); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines, baseline %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

type failingSource struct{ *SliceSource }

func (f failingSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	if i == 2 {
		return nil, fmt.Errorf("disk on fire")
	}
	return f.SliceSource.ReadBlock(ctx, i)
}

func TestShardSourceRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := shard.Create(dir, shard.WriterOptions{RowGroupBytes: 20 << 10, Categories: []shard.Category{{ID: 1, Index: 0, Name: "a"}, {ID: 2, Index: 1, Name: "b"}, {ID: 3, Index: 2, Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	rows := synth(t, 20, 4)
	for i := range rows {
		if err := w.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(nil); err != nil {
		t.Fatal(err)
	}
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if len(src.BlockRows()) < 2 {
		t.Fatalf("want several row groups, got %v", src.BlockRows())
	}
	cfg := testConfig()
	cfg.Epochs = 1
	a := run(t, src, cfg, -1)
	defer a.release()
	// Same rows through memory in the same blocks: identical batches.
	var mem []shard.Image
	for b := range src.BlockRows() {
		r, err := src.ReadBlock(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		mem = append(mem, r...)
	}
	b := run(t, &blockSource{rows: mem, sizes: src.BlockRows()}, cfg, -1)
	defer b.release()
	equalRuns(t, a.recs, b.recs)
}

type blockSource struct {
	rows  []shard.Image
	sizes []int
}

func (s *blockSource) BlockRows() []int { return s.sizes }
func (s *blockSource) ReadBlock(_ context.Context, i int) ([]shard.Image, error) {
	lo := 0
	for _, n := range s.sizes[:i] {
		lo += n
	}
	return s.rows[lo : lo+s.sizes[i]], nil
}

func TestTinyDatasetsAndLargeWorlds(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 3, 0), BlockSize: 2}
	cfg := testConfig()
	cfg.BatchSize = 8
	cfg.Epochs = 2
	total := 0
	for r := 0; r < 5; r++ {
		c := cfg
		c.Rank, c.WorldSize = r, 5
		res := run(t, src, c, -1)
		for _, rec := range res.recs {
			total += int(rec.NumRows())
		}
		if r >= 3 && len(res.recs) != 0 {
			t.Fatalf("rank %d of 5 over 3 rows got %d batches", r, len(res.recs))
		}
		res.release()
	}
	if total != 6 {
		t.Fatalf("%d samples over 2 epochs of 3 rows", total)
	}
	// An empty source is an error, not a run that succeeds with nothing.
	if _, err := New(context.Background(), &SliceSource{}, cfg); !errors.Is(err, ErrEmptySet) {
		t.Fatalf("empty source: %v, want ErrEmptySet", err)
	}
	if _, err := New(context.Background(), src, Config{Rank: 2, WorldSize: 2}); err == nil {
		t.Fatal("rank 2 of 2 accepted")
	}
	if _, err := New(context.Background(), src, Config{Augment: augment.Config{ImgSz: 66}}); err == nil {
		t.Fatal("imgsz not a multiple of the stride accepted")
	}
}

// Crowd regions, as RLE or as polygons, reach the batch only when the
// augmentation keeps them, and then carry iscrowd = 1 and their mask;
// everything else reads 0.
func TestCrowdColumn(t *testing.T) {
	rows := synth(t, 12, 0)
	for i := range rows {
		r := &rows[i]
		w, h := int(r.Width), int(r.Height)
		tri := r.Instances[1].Polygons[0]
		var counts []uint32
		prev, run := false, uint32(0)
		for x := 0; x < w; x++ { // column-major, starting with a run of zeros
			for y := 0; y < h; y++ {
				on := inside(tri, float64(x)+0.5, float64(y)+0.5)
				if on != prev {
					counts, run, prev = append(counts, run), 0, on
				}
				run++
			}
		}
		counts = append(counts, run)
		x0, y0, x1, y1 := float32(w), float32(h), float32(0), float32(0)
		for k := 0; k < len(tri); k += 2 {
			x0, y0, x1, y1 = min(x0, tri[k]), min(y0, tri[k+1]), max(x1, tri[k]), max(y1, tri[k+1])
		}
		if i%3 == 0 { // a crowd region may also come as polygons
			r.Instances[1].IsCrowd = true
			continue
		}
		r.Instances[1] = shard.Instance{AnnID: r.Instances[1].AnnID, Class: 2, IsCrowd: true,
			BBox: [4]float32{x0, y0, x1 - x0, y1 - y0}, RLE: &shard.RLE{Height: int32(h), Width: int32(w), Counts: counts}}
	}
	src := &SliceSource{Rows: rows, BlockSize: 4}
	for _, keep := range []bool{false, true} {
		cfg := testConfig()
		cfg.Val, cfg.Epochs, cfg.Stride = true, 1, 1
		cfg.Augment.HSVH, cfg.Augment.HSVS, cfg.Augment.HSVV = 0, 0, 0
		cfg.Augment.KeepCrowd = keep
		res := run(t, src, cfg, -1)
		crowds, onCells := 0, 0
		for _, rec := range res.recs {
			flags, err := batch.CrowdFlags(rec)
			if err != nil {
				t.Fatal(err)
			}
			im, _ := batch.ImageTensor(rec)
			ms, _ := batch.MaskStack(rec)
			classes := rec.Column(rec.Schema().FieldIndices(batch.ColClasses)[0]).(*array.List).ListValues().(*array.Int32)
			for k := range ms.Count {
				if want := keep && classes.Value(k) == 2; (flags[k] == 1) != want {
					t.Fatalf("keep=%v instance %d (class %d): iscrowd %d", keep, k, classes.Value(k), flags[k])
				}
				if flags[k] == 0 {
					continue
				}
				crowds++
				// The crowd mask is the green triangle: its ON cells are green.
				i := 0
				for int(ms.Offsets[i+1]) <= k {
					i++
				}
				img, m := im.At(i), ms.At(k)
				for c, v := range m {
					if v == 1 && img[64*64+c] > 128 && img[c] < 128 {
						onCells++
					}
				}
			}
		}
		res.release()
		if keep && (crowds != len(rows) || onCells < 100*len(rows)) {
			t.Fatalf("kept %d crowd regions of %d, %d green ON cells", crowds, len(rows), onCells)
		}
	}
}
