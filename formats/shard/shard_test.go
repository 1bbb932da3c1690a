package shard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// testImages returns n pseudo-random rows covering the shapes the format
// must carry: empty images, multi-part polygons, crowd RLE, odd float
// values (negative zero, subnormals, huge coordinates).
func testImages(seed uint64, n int) []Image {
	r := rand.New(rand.NewPCG(seed, 1))
	odd := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 1e30, -3.5, 0.1}
	out := make([]Image, n)
	for i := range out {
		img := Image{
			ImageID:  int64(1000 + i*7),
			FileName: "img/" + string(rune('a'+i%26)) + ".jpg",
			Width:    int32(100 + r.IntN(600)),
			Height:   int32(100 + r.IntN(600)),
			Format:   []string{"jpeg", "png"}[i%2],
			Bytes:    make([]byte, 200+r.IntN(3000)),
		}
		for j := range img.Bytes {
			img.Bytes[j] = byte(r.Uint32())
		}
		ninst := r.IntN(6)
		if i%5 == 0 {
			ninst = 0
		}
		for k := 0; k < ninst; k++ {
			in := Instance{
				AnnID:      int64(i*100 + k),
				CategoryID: int32(1 + r.IntN(90)),
				Class:      int32(r.IntN(80)),
				BBox:       [4]float32{r.Float32() * 500, r.Float32() * 500, r.Float32() * 100, r.Float32() * 100},
				Area:       r.Float32() * 1e4,
			}
			if r.IntN(6) == 0 {
				in.IsCrowd = true
				in.RLE = &RLE{Height: img.Height, Width: img.Width}
				for c := r.IntN(30); c >= 0; c-- {
					in.RLE.Counts = append(in.RLE.Counts, r.Uint32N(5000))
				}
			} else {
				for p := 1 + r.IntN(3); p > 0; p-- {
					ring := make([]float32, 2*(3+r.IntN(40)))
					for q := range ring {
						ring[q] = r.Float32() * 640
					}
					ring[0] = odd[r.IntN(len(odd))]
					in.Polygons = append(in.Polygons, ring)
				}
			}
			img.Instances = append(img.Instances, in)
		}
		out[i] = img
	}
	return out
}

var testOpts = WriterOptions{
	ShardBytes:    20 << 10,
	RowGroupBytes: 6 << 10,
	Source:        Source{Kind: "test", Args: map[string]string{"seed": "1"}},
	Categories:    []Category{{ID: 1, Index: 0, Name: "person"}, {ID: 3, Index: 1, Name: "car", Supercategory: "vehicle"}},
}

// writeAll writes imgs[from:] with checkpoints counting rows, stopping
// (without Close) after stopAfter rows when stopAfter >= 0.
func writeAll(t *testing.T, dir string, opts WriterOptions, imgs []Image, stopAfter int) *Manifest {
	t.Helper()
	next := 0
	opts.Checkpoint = func() Checkpoint {
		return Checkpoint{Next: int64(next), Skipped: map[string]int64{"odd": int64(next / 3)}}
	}
	w, err := Create(dir, opts)
	if opts.Resume && errors.Is(err, ErrComplete) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if cp, ok := w.Resumed(); ok {
		next = int(cp.Next)
	}
	for n := 0; next < len(imgs); n++ {
		if stopAfter >= 0 && n == stopAfter {
			if err := w.Abort(); err != nil {
				t.Fatal(err)
			}
			return nil
		}
		next++
		if err := w.Write(&imgs[next-1]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close(map[string]int64{"odd": int64(len(imgs) / 3)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func sameFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// equalImage compares bit-exactly; nil and empty slices are equal.
func equalImage(a, b *Image) string {
	if a.ImageID != b.ImageID || a.FileName != b.FileName || a.Width != b.Width || a.Height != b.Height || a.Format != b.Format {
		return "header"
	}
	if !bytes.Equal(a.Bytes, b.Bytes) {
		return "bytes"
	}
	if len(a.Instances) != len(b.Instances) {
		return "instance count"
	}
	for i := range a.Instances {
		x, y := &a.Instances[i], &b.Instances[i]
		if x.AnnID != y.AnnID || x.CategoryID != y.CategoryID || x.Class != y.Class || x.IsCrowd != y.IsCrowd ||
			math.Float32bits(x.Area) != math.Float32bits(y.Area) || !sameFloats(x.BBox[:], y.BBox[:]) {
			return "instance fields"
		}
		if len(x.Polygons) != len(y.Polygons) {
			return "ring count"
		}
		for k := range x.Polygons {
			if !sameFloats(x.Polygons[k], y.Polygons[k]) {
				return "ring values"
			}
		}
		if (x.RLE == nil) != (y.RLE == nil) {
			return "rle presence"
		}
		if x.RLE != nil && (x.RLE.Height != y.RLE.Height || x.RLE.Width != y.RLE.Width || !reflect.DeepEqual(append([]uint32{}, x.RLE.Counts...), append([]uint32{}, y.RLE.Counts...))) {
			return "rle"
		}
	}
	return ""
}

func TestRoundTripExact(t *testing.T) {
	imgs := testImages(1, 120)
	dir := t.TempDir()
	m := writeAll(t, dir, testOpts, imgs, -1)
	if len(m.Shards) < 3 {
		t.Fatalf("want several shards at this size, got %d", len(m.Shards))
	}
	if m.Rows != int64(len(imgs)) {
		t.Fatalf("manifest rows %d, want %d", m.Rows, len(imgs))
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	err = set.Images(context.Background(), ReadOptions{Allocator: mem}, func(img *Image) error {
		if d := equalImage(img, &imgs[i]); d != "" {
			t.Fatalf("row %d (image %d): %s differs", i, imgs[i].ImageID, d)
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(imgs) {
		t.Fatalf("read %d rows, wrote %d", i, len(imgs))
	}
	if err := set.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := set.OpenShard(0, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRowGroups() < 2 {
		t.Errorf("shard 0 has %d row groups, want several at RowGroupBytes=%d", r.NumRowGroups(), testOpts.RowGroupBytes)
	}
}

func TestProjectionSkipsImageBytes(t *testing.T) {
	imgs := testImages(2, 30)
	dir := t.TempDir()
	writeAll(t, dir, testOpts, imgs, -1)
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	err = set.Images(context.Background(), ReadOptions{Columns: []string{ColInstances, ColImageID}}, func(img *Image) error {
		if img.Bytes != nil || img.FileName != "" {
			t.Fatalf("row %d: unrequested columns decoded", i)
		}
		want := imgs[i]
		want.Bytes, want.FileName, want.Width, want.Height, want.Format = nil, "", 0, 0, ""
		if d := equalImage(img, &want); d != "" {
			t.Fatalf("row %d: %s differs", i, d)
		}
		i++
		return nil
	})
	if err != nil || i != len(imgs) {
		t.Fatalf("err=%v rows=%d", err, i)
	}
	if _, err := set.OpenShard(0, ReadOptions{Columns: []string{"nope"}}); err == nil {
		t.Fatal("unknown column accepted")
	}
}

func TestDeterministicBytes(t *testing.T) {
	imgs := testImages(3, 80)
	a, b := t.TempDir(), t.TempDir()
	writeAll(t, a, testOpts, imgs, -1)
	writeAll(t, b, testOpts, imgs, -1)
	fa, fb := readDir(t, a), readDir(t, b)
	if len(fa) != len(fb) || len(fa) < 3 {
		t.Fatalf("file sets differ: %d vs %d", len(fa), len(fb))
	}
	for name, x := range fa {
		if !bytes.Equal(x, fb[name]) {
			t.Errorf("%s differs between identical runs", name)
		}
	}
}

func TestResumeReproducesUninterruptedRun(t *testing.T) {
	imgs := testImages(4, 90)
	ref := t.TempDir()
	writeAll(t, ref, testOpts, imgs, -1)
	want := readDir(t, ref)
	for _, stop := range []int{0, 1, 17, 40, 89} {
		dir := t.TempDir()
		writeAll(t, dir, testOpts, imgs, stop)
		if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
			t.Fatalf("stop %d: manifest written by an interrupted run", stop)
		}
		// A second interruption on top of the first must not matter either.
		o := testOpts
		o.Resume = true
		writeAll(t, dir, o, imgs, 5)
		writeAll(t, dir, o, imgs, -1)
		got := readDir(t, dir)
		if len(got) != len(want) {
			t.Fatalf("stop %d: %d files, want %d", stop, len(got), len(want))
		}
		for name, b := range want {
			if !bytes.Equal(b, got[name]) {
				t.Errorf("stop %d: %s differs from the uninterrupted run", stop, name)
			}
		}
	}
}

func TestResumeKeepsFinishedShards(t *testing.T) {
	imgs := testImages(5, 90)
	dir := t.TempDir()
	writeAll(t, dir, testOpts, imgs, 60)
	st, err := os.Stat(filepath.Join(dir, ShardName(0)))
	if err != nil {
		t.Fatal(err)
	}
	o := testOpts
	o.Resume = true
	w, err := Create(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := w.Resumed()
	if !ok || cp.Next == 0 || cp.Next > 60 || cp.Skipped["odd"] != cp.Next/3 {
		t.Fatalf("resumed checkpoint %+v ok=%v", cp, ok)
	}
	w.Abort()
	st2, err := os.Stat(filepath.Join(dir, ShardName(0)))
	if err != nil || !os.SameFile(st, st2) || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("finished shard was rewritten: %v", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	imgs := testImages(6, 40)
	dir := t.TempDir()
	writeAll(t, dir, testOpts, imgs, 30)

	if _, err := Create(dir, testOpts); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Errorf("non-resume into an interrupted conversion: %v", err)
	}
	o := testOpts
	o.Resume = true
	o.ShardBytes++
	if _, err := Create(dir, o); err == nil || !strings.Contains(err.Error(), "other options") {
		t.Errorf("resume with other options: %v", err)
	}
	o.ShardBytes--
	writeAll(t, dir, o, imgs, -1)
	if _, err := Create(dir, o); !errors.Is(err, ErrComplete) {
		t.Errorf("resume of a finished conversion: %v", err)
	}
	// A corrupted finished shard is not silently kept on resume.
	dir2 := t.TempDir()
	writeAll(t, dir2, testOpts, imgs, 30)
	corrupt(t, filepath.Join(dir2, ShardName(0)))
	if _, err := Create(dir2, o); err == nil || !strings.Contains(err.Error(), ShardName(0)) {
		t.Errorf("resume over a corrupted shard: %v", err)
	}
}

func corrupt(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyFindsDamage(t *testing.T) {
	imgs := testImages(7, 60)
	for _, tc := range []struct {
		name   string
		damage func(dir string)
		want   string
	}{
		{"flipped byte", func(dir string) { corrupt(t, filepath.Join(dir, ShardName(1))) }, ShardName(1) + ": sha256"},
		{"missing", func(dir string) { os.Remove(filepath.Join(dir, ShardName(2))) }, ShardName(2)},
		{"truncated", func(dir string) { os.Truncate(filepath.Join(dir, ShardName(0)), 100) }, ShardName(0) + ": 100 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeAll(t, dir, testOpts, imgs, -1)
			tc.damage(dir)
			set, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			err = set.Verify(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

func TestManifestChecks(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("empty dir: %v", err)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"format_version": 99}`, "format_version 99"},
		{`{"format_version": 1, "rows": 5, "shards": []}`, "disagree"},
		{`{"format_version": 1, "shards": [{"file": "../x.parquet"}]}`, "plain file name"},
		{`{"format_version": 1, "categories": [{"id": 4, "index": 1}]}`, "contiguous"},
		{`{"format_version": 1,`, "unexpected EOF"},
	} {
		os.WriteFile(filepath.Join(dir, ManifestName), []byte(tc.json), 0o644)
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.json, err, tc.want)
		}
	}
}

func TestEmptyConversion(t *testing.T) {
	dir := t.TempDir()
	m := writeAll(t, dir, testOpts, nil, -1)
	if m.Rows != 0 || len(m.Shards) != 0 {
		t.Fatalf("%+v", m)
	}
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Images(context.Background(), ReadOptions{}, func(*Image) error { t.Fatal("row"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestReadingRefusesResizedShard(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, dir, testOpts, testImages(8, 30), -1)
	os.Truncate(filepath.Join(dir, ShardName(1)), 500)
	set, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = set.Images(context.Background(), ReadOptions{}, func(*Image) error { return nil })
	if err == nil || !strings.Contains(err.Error(), ShardName(1)+": 500 bytes, manifest says") {
		t.Fatalf("Images over a truncated shard: %v", err)
	}
}

// Issue 30: Verify stopped at a shard's first bad row, so 16 flipped
// images (sha256 recomputed, so that only the crc32c can catch them) gave
// one problem. Every bad row is one problem.
func TestVerifyReportsEveryBadRow(t *testing.T) {
	imgs := testImages(7, 60)
	opts := WriterOptions{ShardBytes: 1 << 20, RowGroupBytes: 16 << 10}
	for _, n := range []int{1, 16} {
		t.Run(fmt.Sprint(n, " flipped"), func(t *testing.T) {
			dir := t.TempDir()
			m := writeAll(t, dir, opts, imgs, -1)
			if len(m.Shards) != 1 {
				t.Fatalf("%d shards, want one", len(m.Shards))
			}
			path := filepath.Join(dir, m.Shards[0].File)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < n; k++ {
				img := imgs[3*k+1].Bytes
				at := bytes.Index(b, img)
				if at < 0 {
					t.Fatalf("image %d not found in the shard", 3*k+1)
				}
				b[at+len(img)/2] ^= 0xa5
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			// Recompute the manifest's sha256, so that only the rows'
			// crc32c can tell.
			mb, err := os.ReadFile(filepath.Join(dir, ManifestName))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			mb = bytes.Replace(mb, []byte(m.Shards[0].SHA256), []byte(hex.EncodeToString(sum[:])), 1)
			if err := os.WriteFile(filepath.Join(dir, ManifestName), mb, 0o644); err != nil {
				t.Fatal(err)
			}
			set, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			err = set.Verify(context.Background())
			var problems []string
			if err != nil {
				problems = strings.Split(err.Error(), "\n")
			}
			if len(problems) != n {
				t.Fatalf("%d problems, want %d:\n%v", len(problems), n, err)
			}
			for k, p := range problems {
				if !strings.Contains(p, "checksum") || !strings.Contains(p, fmt.Sprintf("image %d", imgs[3*k+1].ImageID)) {
					t.Errorf("problem %d %q: want the checksum of image %d", k, p, imgs[3*k+1].ImageID)
				}
			}
			if !errors.Is(err, ErrImageChecksum) {
				t.Errorf("Verify = %v, want it to wrap ErrImageChecksum", err)
			}
		})
	}
}
