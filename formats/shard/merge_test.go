package shard

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func planOf(imgs []Image, shardBytes int64) Plan {
	sizes := make([]int64, len(imgs))
	for i := range imgs {
		sizes[i] = PlannedRowSize(&imgs[i], int64(len(imgs[i].Bytes)))
	}
	return PlanShards(sizes, shardBytes)
}

// writePart converts part p of imgs into dir the way convert --part does,
// stopping without Close after stopAfter rows when stopAfter >= 0.
func writePart(t *testing.T, dir string, opts WriterOptions, imgs []Image, p Part, stopAfter int) {
	t.Helper()
	l, err := planOf(imgs, opts.ShardBytes).Layout(p)
	if err != nil {
		t.Fatal(err)
	}
	opts.Layout = &l
	next := l.FirstRow
	opts.Checkpoint = func() Checkpoint { return Checkpoint{Next: next} }
	w, err := Create(dir, opts)
	if opts.Resume && errors.Is(err, ErrComplete) {
		return // an empty part finishes before it can be interrupted
	}
	if err != nil {
		t.Fatalf("part %s: %v", p, err)
	}
	if cp, ok := w.Resumed(); ok {
		next = cp.Next
	}
	for n := 0; next < l.FirstRow+l.Rows(); n++ {
		if n == stopAfter {
			w.Abort()
			return
		}
		next++
		if err := w.Write(&imgs[next-1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(map[string]int64{"odd": int64(len(imgs) / 3)}); err != nil {
		t.Fatalf("part %s: %v", p, err)
	}
}

func TestPlanCutsWhereTheWriterCuts(t *testing.T) {
	seeds := uint64(6)
	if testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		imgs := testImages(seed, 40+int(seed)*13)
		o := testOpts
		o.ShardBytes = int64(4<<10) << seed
		m := writeAll(t, t.TempDir(), o, imgs, -1)
		p := planOf(imgs, o.ShardBytes)
		if len(p.ShardRows) != len(m.Shards) {
			t.Fatalf("seed %d: plan has %d shards, the writer %d", seed, len(p.ShardRows), len(m.Shards))
		}
		for k, s := range m.Shards {
			if p.ShardRows[k] != s.Rows {
				t.Errorf("seed %d shard %d: plan %d rows, writer %d", seed, k, p.ShardRows[k], s.Rows)
			}
		}
	}
}

func TestMergeIsByteIdenticalToOneProcess(t *testing.T) {
	imgs := testImages(11, 120)
	ref := t.TempDir()
	writeAll(t, ref, testOpts, imgs, -1)
	want := readDir(t, ref)
	shards := len(planOf(imgs, testOpts.ShardBytes).ShardRows)
	if shards < 5 {
		t.Fatalf("test needs several shards, has %d", shards)
	}
	r := rand.New(rand.NewPCG(2, 3))
	counts := []int{1, 2, 3, shards, shards + 4}
	if testing.Short() {
		counts = []int{3, shards + 4}
	}
	for _, n := range counts {
		dir := t.TempDir()
		// Parts finish in any order; one is interrupted and resumed.
		for _, i := range r.Perm(n) {
			p := Part{Index: i, Count: n}
			if i == n/2 {
				writePart(t, dir, testOpts, imgs, p, 7)
				o := testOpts
				o.Resume = true
				writePart(t, dir, o, imgs, p, -1)
				continue
			}
			writePart(t, dir, testOpts, imgs, p, -1)
		}
		if _, err := Merge(dir, MergeOptions{Verify: true}); err != nil {
			t.Fatalf("%d parts: %v", n, err)
		}
		got := readDir(t, dir)
		if len(got) != len(want) {
			t.Errorf("%d parts: %d files after the merge, one process writes %d", n, len(got), len(want))
		}
		for name, b := range want {
			if !bytes.Equal(b, got[name]) {
				t.Errorf("%d parts: %s differs from the single-process conversion", n, name)
			}
		}
		if _, err := Merge(dir, MergeOptions{}); !errors.Is(err, ErrComplete) {
			t.Errorf("%d parts: second merge: %v, want ErrComplete", n, err)
		}
	}
}

func TestMergeRefusesPartsThatDoNotBelongTogether(t *testing.T) {
	imgs := testImages(12, 60)
	edit := func(t *testing.T, dir string, p Part, old, new string) {
		path := filepath.Join(dir, PartManifestName(p))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s has no %q", path, old)
		}
		if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p0, p1 := Part{0, 2}, Part{1, 2}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"missing part", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p1, -1)
		}, "1 of 2 parts have no part manifest yet (0/2)"},
		{"other categories", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			o := testOpts
			o.Categories = []Category{{ID: 1, Index: 0, Name: "person"}}
			writePart(t, dir, o, imgs, p1, -1)
		}, "different categories"},
		{"other shard size", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			edit(t, dir, p1, `"shard_bytes": 20480`, `"shard_bytes": 30720`)
		}, "different --shard-size"},
		{"newer format version", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			edit(t, dir, p1, `"format_version": `+strconv.Itoa(versionEncoded), `"format_version": `+strconv.Itoa(FormatVersion+1))
		}, "format_version " + strconv.Itoa(FormatVersion+1) + ": this segpipe reads versions"},
		{"other format version", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			edit(t, dir, p1, `"format_version": `+strconv.Itoa(versionEncoded), `"format_version": `+strconv.Itoa(MinFormatVersion))
		}, "different format versions"},
		{"overlapping images", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			l, _ := planOf(imgs, testOpts.ShardBytes).Layout(p1)
			edit(t, dir, p1, `"first_row": `+strconv.FormatInt(l.FirstRow, 10), `"first_row": `+strconv.FormatInt(l.FirstRow-3, 10))
		}, "part 1/2 overlaps the part before it"},
		{"two conversions", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			edit(t, dir, p1, `"count": 2`, `"count": 3`)
			os.Rename(filepath.Join(dir, PartManifestName(p1)), filepath.Join(dir, PartManifestName(Part{1, 3})))
		}, "parts of two conversions"},
		{"missing shard", func(t *testing.T, dir string) {
			writePart(t, dir, testOpts, imgs, p0, -1)
			writePart(t, dir, testOpts, imgs, p1, -1)
			os.Remove(filepath.Join(dir, ShardName(1)))
		}, "merge: shard"},
		{"nothing to merge", func(t *testing.T, dir string) {}, "no part manifests"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			_, err := Merge(dir, MergeOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Merge: %v, want an error containing %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
				t.Error("a refused merge wrote manifest.json")
			}
		})
	}
}

func TestPartWriterRefusesMergedDirectory(t *testing.T) {
	imgs := testImages(13, 30)
	dir := t.TempDir()
	writeAll(t, dir, testOpts, imgs, -1)
	l, _ := planOf(imgs, testOpts.ShardBytes).Layout(Part{0, 2})
	o := testOpts
	o.Layout = &l
	if _, err := Create(dir, o); err == nil || !strings.Contains(err.Error(), "already holds a merged conversion") {
		t.Fatalf("Create: %v", err)
	}
}

func TestParsePart(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Part
		ok   bool
	}{{"0/1", Part{0, 1}, true}, {"3/8", Part{3, 8}, true}, {" 7/8 ", Part{7, 8}, true},
		{"8/8", Part{}, false}, {"-1/4", Part{}, false}, {"1/0", Part{}, false}, {"1", Part{}, false}, {"a/b", Part{}, false}} {
		got, err := ParsePart(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParsePart(%q) = %v, %v", c.in, got, err)
		}
	}
}

func FuzzParsePart(f *testing.F) {
	for _, s := range []string{"0/1", "3/8", "8/8", "-1/2", "1/", "/", "99999999999999999999/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePart(s)
		if err != nil {
			return
		}
		if p.Index < 0 || p.Index >= p.Count {
			t.Fatalf("ParsePart(%q) accepted %v", s, p)
		}
		if q, err := ParsePart(p.String()); err != nil || q != p {
			t.Fatalf("%v does not round-trip: %v, %v", p, q, err)
		}
	})
}

func TestMergeKeepsAndChecksThePixels(t *testing.T) {
	imgs := pixelImages(t, 13, 40, FormatZstd)
	p0, p1 := Part{Index: 0, Count: 2}, Part{Index: 1, Count: 2}
	o := testOpts
	o.ShardBytes = 1 << 10
	o.Pixels = &Pixels{Encoding: FormatZstd, MaxSide: 16, Resample: ResampleArea}
	dir := t.TempDir()
	writePart(t, dir, o, imgs, p0, -1)
	writePart(t, dir, o, imgs, p1, -1)
	m, err := Merge(dir, MergeOptions{Verify: true})
	if err != nil || m.Pixels == nil || *m.Pixels != *o.Pixels || m.FormatVersion != 3 {
		t.Fatalf("merge: %v, pixels %+v version %d", err, m.Pixels, m.FormatVersion)
	}
	other := o
	other.Pixels = &Pixels{Encoding: FormatZstd, MaxSide: 32, Resample: ResampleArea}
	dir = t.TempDir()
	writePart(t, dir, o, imgs, p0, -1)
	writePart(t, dir, other, imgs, p1, -1)
	if _, err := Merge(dir, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "different pixels") {
		t.Errorf("parts of other --max-side merged: %v", err)
	}
}
