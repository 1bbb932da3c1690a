package coco

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/datasets/synth"
	"github.com/segpipe/segpipe/formats/shard"
)

type row struct {
	id    int64
	bytes int
	anns  []int64
	first float32
}

func openSynth(t *testing.T, workers int) (*Dataset, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := synth.Config{Images: 40, Seed: 5, MaxSide: 48}
	if err := synth.Generate(dir, cfg); err != nil {
		t.Fatal(err)
	}
	d, err := Open(synth.AnnotationsPath(dir, cfg), synth.ImagesDir(dir), Options{Strict: true, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	return d, dir
}

func readRows(t *testing.T, d *Dataset, start int) []row {
	t.Helper()
	var out []row
	err := d.Images(context.Background(), start, func(im *shard.Image) error {
		r := row{id: im.ImageID, bytes: len(im.Bytes)}
		for _, in := range im.Instances {
			r.anns = append(r.anns, in.AnnID)
			if len(in.Polygons) > 0 && r.first == 0 {
				r.first = in.Polygons[0][0]
			}
			// fn may scribble on what it is given; later rows and later
			// iterations must not see it.
			for _, p := range in.Polygons {
				for i := range p {
					p[i] = -1
				}
			}
			if in.RLE != nil {
				for i := range in.RLE.Counts {
					in.RLE.Counts[i] = 0
				}
			}
		}
		for i := range im.Bytes {
			im.Bytes[i] = 0
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImagesOrderAndResume(t *testing.T) {
	d1, _ := openSynth(t, 1)
	d8, _ := openSynth(t, 8)
	all := readRows(t, d1, 0)
	if len(all) != 40 || d1.Len() != 40 {
		t.Fatalf("%d rows, Len %d", len(all), d1.Len())
	}
	for i := 1; i < len(all); i++ {
		if all[i].id <= all[i-1].id {
			t.Fatalf("row %d: image %d after %d", i, all[i].id, all[i-1].id)
		}
	}
	if again := readRows(t, d1, 0); !reflect.DeepEqual(again, all) {
		t.Fatal("second iteration differs: fn's writes leaked into the dataset")
	}
	if par := readRows(t, d8, 0); !reflect.DeepEqual(par, all) {
		t.Fatal("8 workers emit a different sequence than 1")
	}
	for _, start := range []int{1, 17, 39, 40} {
		if got := readRows(t, d8, start); !reflect.DeepEqual(got, all[start:]) && !(len(got) == 0 && start == 40) {
			t.Errorf("start %d: %d rows, want the last %d", start, len(got), 40-start)
		}
	}
	for _, start := range []int{-1, 41} {
		if err := d8.Images(context.Background(), start, func(*shard.Image) error { return nil }); err == nil {
			t.Errorf("start %d accepted", start)
		}
	}
}

func TestImagesStops(t *testing.T) {
	d, dir := openSynth(t, 3)
	stop := errors.New("stop here")
	n := 0
	err := d.Images(context.Background(), 0, func(*shard.Image) error {
		n++
		if n == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 5 {
		t.Errorf("fn error: %v after %d calls", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = 0
	err = d.Images(ctx, 0, func(*shard.Image) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n > 3+2*3+1 {
		t.Errorf("cancel: %v after %d calls", err, n)
	}
	// A file that disappears after Open is an error, not a silent skip.
	matches, _ := filepath.Glob(filepath.Join(synth.ImagesDir(dir), "*.jpg"))
	if err := os.Remove(matches[len(matches)/2]); err != nil {
		t.Fatal(err)
	}
	err = d.Images(context.Background(), 0, func(*shard.Image) error { return nil })
	if err == nil || !strings.Contains(err.Error(), filepath.Base(matches[len(matches)/2])) {
		t.Errorf("removed file: %v", err)
	}
}
