package pipeline

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segpipe/segpipe/formats/shard"
)

// labelsOf is a run's classes, instance counts per image and boxes, in
// delivery order.
func labelsOf(t *testing.T, recs []arrow.RecordBatch) (classes, perImage []int32, boxes []float32, ids []int64) {
	t.Helper()
	for _, rec := range recs {
		c := columnsOf(t, rec)
		classes = append(classes, arrow.Int32Traits.CastFromBytes(c.Classes.Bytes())...)
		perImage = append(perImage, arrow.Int32Traits.CastFromBytes(c.BoxesPerImage.Bytes())...)
		boxes = append(boxes, arrow.Float32Traits.CastFromBytes(c.Boxes.Bytes())...)
		ids = append(ids, imageIDsOf(t, rec)...)
	}
	return
}

// Classes keeps only the instances of its classes, uncounted, under their
// own indices; an image left without one is delivered empty, as
// Ultralytics keeps it as a background image. SingleClass then gives every
// kept instance class 0, after Classes chose them; an instance of a class
// past the set's categories is damage (counted) unless SingleClass keeps
// it as class 0, as Ultralytics' single_cls does.
func TestClassesAndSingleClassFilterAndRemapInstances(t *testing.T) {
	rows := synth(t, 12, 0) // each row: a quad of class 1, a triangle of class 2
	rows[3].Instances[0].Class = 0
	rows[5].Instances[1].Class = 7 // outside the 3 categories
	dir := writeSet(t, rows)
	src, err := OpenShards(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, tc := range []struct {
		name    string
		classes []int32
		single  bool
		// want is the classes delivered per row (in row order) given its
		// instances' classes.
		want func(row int, cls []int32) []int32
		bad  int64
	}{
		{"every class", nil, false, func(_ int, c []int32) []int32 { return c }, 1},
		{"classes [2]", []int32{2}, false, func(_ int, c []int32) []int32 { return keepOnly(c, 2) }, 1},
		{"classes [0 1]", []int32{1, 0, 1}, false, func(_ int, c []int32) []int32 { return keepOnly(c, 0, 1) }, 1},
		{"classes [5] (none present)", []int32{5}, false, func(int, []int32) []int32 { return nil }, 1},
		{"single class", nil, true, func(_ int, c []int32) []int32 { return zeros(len(c)) }, 0},
		{"classes [1] then single class", []int32{1}, true, func(_ int, c []int32) []int32 { return zeros(len(keepOnly(c, 1))) }, 0},
	} {
		cfg := testConfig()
		cfg.Val, cfg.Epochs, cfg.Classes, cfg.SingleClass = true, 1, tc.classes, tc.single
		l, err := New(context.Background(), src, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var recs []arrow.RecordBatch
		for rec, err := range l.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		st := l.Stats()
		l.Close()
		classes, perImage, _, ids := labelsOf(t, recs)
		got := map[int64][]int32{}
		off := 0
		for i, id := range ids {
			got[id] = classes[off : off+int(perImage[i])]
			off += int(perImage[i])
		}
		if len(ids) != len(rows) {
			t.Errorf("%s: %d images delivered, want %d (an image without instances is kept)", tc.name, len(ids), len(rows))
		}
		for i, row := range rows {
			var cls []int32
			for _, in := range row.Instances {
				if in.Class >= 0 && (in.Class < 3 || tc.single) {
					cls = append(cls, in.Class)
				}
			}
			if want := tc.want(i, cls); !slices.Equal(got[row.ImageID], want) {
				t.Errorf("%s: row %d classes %v, want %v", tc.name, i, got[row.ImageID], want)
			}
		}
		if st.Skipped[SkipBadClass] != tc.bad || int64(len(st.Skipped)) != min(tc.bad, 1) {
			t.Errorf("%s: skipped %v, want only %s=%d", tc.name, st.Skipped, SkipBadClass, tc.bad)
		}
		for _, r := range recs {
			r.Release()
		}
	}
}

func keepOnly(c []int32, keep ...int32) []int32 {
	var out []int32
	for _, x := range c {
		if slices.Contains(keep, x) {
			out = append(out, x)
		}
	}
	return out
}

func zeros(n int) []int32 {
	if n == 0 {
		return nil
	}
	return make([]int32, n)
}

// SingleClass changes the classes column and nothing else: the same
// images, boxes and masks, byte for byte, in training too.
func TestSingleClassChangesOnlyTheClasses(t *testing.T) {
	src := &SliceSource{Rows: synth(t, 12, 0), BlockSize: 5}
	cfg := testConfig()
	a := run(t, src, cfg, 0)
	defer a.release()
	cfg.SingleClass = true
	b := run(t, src, cfg, 0)
	defer b.release()
	if len(a.recs) != len(b.recs) {
		t.Fatalf("%d batches, want %d", len(b.recs), len(a.recs))
	}
	for i := range a.recs {
		ca, cb := columnsOf(t, a.recs[i]), columnsOf(t, b.recs[i])
		for _, p := range [][2]*memory.Buffer{{ca.Images, cb.Images}, {ca.Boxes, cb.Boxes},
			{ca.Masks, cb.Masks}, {ca.ImageIDs, cb.ImageIDs}, {ca.BoxesPerImage, cb.BoxesPerImage}} {
			if (p[0] == nil) != (p[1] == nil) || p[0] != nil && !bytes.Equal(p[0].Bytes(), p[1].Bytes()) {
				t.Fatalf("batch %d: a column other than classes changed", i)
			}
		}
		for _, c := range classesOf(t, b.recs[i]) {
			if c != 0 {
				t.Fatalf("batch %d: class %d under SingleClass", i, c)
			}
		}
	}
}

// FractionRows counts as Ultralytics does: max(1, round(n·f)) with
// Python's round (halves to even); 0 and 1 keep every row.
func TestFractionRowsRoundsAsUltralytics(t *testing.T) {
	for _, tc := range []struct {
		rows int
		f    float64
		want int
	}{
		{10, 0, 10}, {10, 1, 10}, {10, 0.5, 5}, {10, 0.25, 2}, {10, 0.35, 4}, {10, 0.01, 1},
		{12, 0.125, 2}, {12, 0.375, 4}, {7, 0.999, 7}, {0, 0.5, 0}, {160, 0.1, 16},
	} {
		if got := FractionRows(tc.rows, tc.f); got != tc.want {
			t.Errorf("FractionRows(%d, %v) = %d, want %d", tc.rows, tc.f, got, tc.want)
		}
	}
}

// Fraction reads the first rows in storage order (here cut inside a
// block), in validation and in training, at any worker count; 0 and 1
// leave the source as it is.
func TestFractionReadsTheFirstRows(t *testing.T) {
	rows := synth(t, 12, 0)
	src := &SliceSource{Rows: rows, BlockSize: 5}
	for _, f := range []float64{0, 1} {
		if got := (Config{Fraction: f}).Subset(src); got != Source(src) {
			t.Errorf("fraction %v: a new source", f)
		}
	}
	want := []int64{1000, 1001, 1002, 1003, 1004, 1005, 1006}
	for _, val := range []bool{true, false} {
		var first []byte
		for _, workers := range []int{1, 3} {
			cfg := testConfig()
			cfg.Val, cfg.Epochs, cfg.Fraction, cfg.Workers = val, 1, 7.0/12, workers
			r := run(t, src, cfg, 0)
			_, _, _, ids := labelsOf(t, r.recs)
			slices.Sort(ids)
			if !slices.Equal(ids, want) {
				t.Errorf("val %v: images %v, want %v", val, ids, want)
			}
			got := ipcBytes(t, r.recs)
			if first == nil {
				first = got
			} else if !bytes.Equal(first, got) {
				t.Errorf("val %v: batches differ at %d workers", val, workers)
			}
			r.release()
		}
	}
}

// A prefix cut inside a damaged block reports only the damage of the rows
// it keeps.
func TestFractionKeepsTheDamageOfItsRows(t *testing.T) {
	src := &rowDamageSource{SliceSource{Rows: synth(t, 6, 0), BlockSize: 6}, []int{1, 4}}
	sub := Config{Fraction: 0.5}.Subset(src)
	rows, err := sub.ReadBlock(context.Background(), 0)
	dmg, ok := errors.AsType[*Damage](err)
	if len(rows) != 3 || !ok || len(dmg.Rows) != 1 || dmg.Rows[0].Row != 1 {
		t.Fatalf("%d rows, error %v: want 3 rows and row 1 damaged", len(rows), err)
	}
	src.bad = []int{4}
	if rows, err := sub.ReadBlock(context.Background(), 0); len(rows) != 3 || err != nil {
		t.Fatalf("%d rows, error %v: want 3 rows, no damage", len(rows), err)
	}
}

type rowDamageSource struct {
	SliceSource
	bad []int
}

func (d *rowDamageSource) ReadBlock(ctx context.Context, i int) ([]shard.Image, error) {
	rows, err := d.SliceSource.ReadBlock(ctx, i)
	if err != nil {
		return nil, err
	}
	dmg := &Damage{Where: "test block"}
	for _, r := range d.bad {
		dmg.Rows = append(dmg.Rows, BadRow{Row: r, Reason: SkipBadRow, Err: errors.New("bad")})
	}
	return rows, dmg
}

func TestDatasetOptionsOutOfRangeAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"fraction -0.1", func(c *Config) { c.Fraction = -0.1 }},
		{"fraction 1.5", func(c *Config) { c.Fraction = 1.5 }},
		{"fraction NaN", func(c *Config) { c.Fraction = math.NaN() }},
		{"class -1", func(c *Config) { c.Classes = []int32{0, -1} }},
		{"too many classes", func(c *Config) { c.Classes = make([]int32, MaxKeepClasses+1) }},
	} {
		cfg := testConfig()
		tc.set(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
		}
	}
}
