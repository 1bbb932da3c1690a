package synth

import (
	"bytes"
	"context"
	"encoding/json"
	"image/jpeg"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/datasets/coco"
	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/formats/shard"
)

func TestGenerateIsDeterministic(t *testing.T) {
	cfg := Config{Images: 10, Seed: 7, MaxSide: 96}
	a, b := t.TempDir(), t.TempDir()
	if err := Generate(a, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 1 // a different schedule must not change a byte
	if err := Generate(b, cfg); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		x, _ := os.ReadFile(p)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between runs (%v)", rel, err)
		}
		n++
		return nil
	})
	if err != nil || n != 11 {
		t.Fatalf("walked %d files (%v), want 10 images + 1 annotation file", n, err)
	}
	c := t.TempDir()
	if err := Generate(c, Config{Images: 10, Seed: 8, MaxSide: 96}); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(AnnotationsPath(a, cfg))
	y, _ := os.ReadFile(AnnotationsPath(c, cfg))
	if bytes.Equal(x, y) {
		t.Error("seeds 7 and 8 gave the same annotations")
	}
}

func TestGeneratedDatasetReadsClean(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Images: 60, Seed: 1, MaxSide: 64} // seed 1 has 6 crowd regions
	if err := Generate(dir, cfg); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(AnnotationsPath(dir, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"counts": "`)) || !bytes.Contains(raw, []byte(`"counts": [`)) {
		t.Fatal("want crowd RLEs in both the string and the list form")
	}
	d, err := coco.Open(AnnotationsPath(dir, cfg), ImagesDir(dir), coco.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 60 || len(d.Categories()) != 80 {
		t.Fatalf("Len %d, %d categories", d.Len(), len(d.Categories()))
	}
	var crowd, multi int
	err = d.Images(context.Background(), 0, func(im *shard.Image) error {
		for _, in := range im.Instances {
			if in.IsCrowd {
				crowd++
				r := rle.RLE{H: int(in.RLE.Height), W: int(in.RLE.Width), Counts: in.RLE.Counts}
				if r.H != int(im.Height) || r.W != int(im.Width) || r.Area() != int(in.Area) {
					t.Errorf("crowd %d: size %dx%d area %d vs image %dx%d area %v", in.AnnID, r.H, r.W, r.Area(), im.Height, im.Width, in.Area)
				}
			}
			if len(in.Polygons) > 1 {
				multi++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if crowd == 0 || multi == 0 {
		t.Errorf("%d crowd and %d multi-part instances, want some of each", crowd, multi)
	}
}

// TestColumnRLEMatchesBruteForce checks the span rasteriser used for crowd
// masks (and for drawing) against a per-pixel even-odd test.
func TestColumnRLEMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		w, h := 1+r.IntN(40), 1+r.IntN(40)
		var rings [][]float64
		for range 1 + r.IntN(3) {
			n := 3 + r.IntN(8)
			ring := make([]float64, 0, 2*n)
			for range n {
				// Half-integers and exact pixel centres hit the tie rules.
				ring = append(ring, math.Round(r.Float64()*float64(w+4)*4)/4-2, math.Round(r.Float64()*float64(h+4)*4)/4-2)
			}
			rings = append(rings, ring)
		}
		mask := make([]byte, w*h) // row-major
		for y := range h {
			for x := range w {
				if insideEvenOdd(rings, float64(x)+0.5, float64(y)+0.5) {
					mask[y*w+x] = 1
				}
			}
		}
		want, err := rle.FromMask(mask, h, w)
		if err != nil {
			t.Fatal(err)
		}
		got := columnRLE(rings, w, h)
		if !slices.Equal(got, want.Counts) {
			t.Fatalf("trial %d (%dx%d, rings %v): counts %v, want %v", trial, w, h, rings, got, want.Counts)
		}
	}
}

// insideEvenOdd is the textbook crossing test with the same half-open rule
// as crossings: an edge counts when exactly one endpoint is <= py.
func insideEvenOdd(rings [][]float64, px, py float64) bool {
	in := false
	for _, ring := range rings {
		n := len(ring) / 2
		for i := range n {
			j := (i + 1) % n
			x0, y0, x1, y1 := ring[2*i], ring[2*i+1], ring[2*j], ring[2*j+1]
			if (y0 <= py) == (y1 <= py) {
				continue
			}
			x := x0 + (py-y0)*(x1-x0)/(y1-y0)
			if px >= x {
				in = !in
			}
		}
	}
	return in
}

func TestStatisticsResembleCOCO(t *testing.T) {
	cfg := Config{Images: 3000, Seed: 11}.withDefaults()
	var inst, empty, crowd, multi, small, medium, large int
	var lens []int
	for i := range cfg.Images {
		sp := genSpec(cfg, i)
		if len(sp.shapes) == 0 {
			empty++
		}
		for _, s := range sp.shapes {
			inst++
			if s.crowd {
				crowd++
				continue
			}
			if len(s.rings) > 1 {
				multi++
			}
			for _, r := range s.rings {
				lens = append(lens, len(r)/2)
			}
			switch a := s.area; {
			case a < 32*32:
				small++
			case a < 96*96:
				medium++
			default:
				large++
			}
		}
	}
	slices.Sort(lens)
	mean := float64(inst) / float64(cfg.Images)
	median, p95 := lens[len(lens)/2], lens[len(lens)*95/100]
	poly := float64(small + medium + large)
	t.Logf("mean %.2f instances/image, %d empty, %d crowd, %d multi-part, ring median %d p95 %d, small/medium/large %.2f/%.2f/%.2f",
		mean, empty, crowd, multi, median, p95, float64(small)/poly, float64(medium)/poly, float64(large)/poly)
	check := func(name string, got, lo, hi float64) {
		if got < lo || got > hi {
			t.Errorf("%s = %v, want in [%v, %v]", name, got, lo, hi)
		}
	}
	check("instances per image", mean, 6.8, 7.8)
	check("ring length median", float64(median), 13, 17)
	check("ring length p95", float64(p95), 44, 56)
	check("empty fraction", float64(empty)/float64(cfg.Images), 0.003, 0.02)
	check("crowd fraction", float64(crowd)/float64(inst), 0.005, 0.015)
	check("multi-part fraction", float64(multi)/poly, 0.09, 0.15)
	check("small fraction", float64(small)/poly, 0.35, 0.47)
	check("medium fraction", float64(medium)/poly, 0.28, 0.40)
	check("large fraction", float64(large)/poly, 0.19, 0.31)
}

// TestStringRLEIsEscaped covers a compressed string holding '\', which the
// COCO alphabet '0'..'o' contains and JSON must escape.
func TestStringRLEIsEscaped(t *testing.T) {
	counts := []uint32{44, 1, 8*8 - 45}
	if !bytes.Contains(rle.AppendEncode(nil, counts), []byte{'\\'}) {
		t.Fatal("test counts do not encode to a backslash")
	}
	b := appendAnn(nil, 1, 2, 1, shape{crowd: true, rle: counts, bbox: [4]float64{5, 4, 1, 1}, area: 1}, true, 8, 8)
	var a struct {
		Segmentation struct {
			Size   []int  `json:"size"`
			Counts string `json:"counts"`
		} `json:"segmentation"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	got, err := rle.Decode(a.Segmentation.Counts)
	if err != nil || !slices.Equal(got, counts) || !slices.Equal(a.Segmentation.Size, []int{8, 8}) {
		t.Fatalf("decoded %v %v (%v), want %v", got, a.Segmentation.Size, err, counts)
	}
}

// TestEasySet checks what makes an Easy set learnable in minutes: few
// whole (never overlapping) shapes of the asked classes, drawn in their class's colour where
// the annotations put them, and the same bytes on every run.
func TestEasySet(t *testing.T) {
	cfg := Config{Images: 40, Seed: 3, MaxSide: 128, Easy: true, Classes: 3}
	dir, again := t.TempDir(), t.TempDir()
	if err := Generate(dir, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Workers = 1
	if err := Generate(again, cfg); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"annotations/instances_train.json", "images/000000000007.jpg"} {
		x, _ := os.ReadFile(filepath.Join(dir, f))
		y, err := os.ReadFile(filepath.Join(again, f))
		if err != nil || len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between runs (%v)", f, err)
		}
	}
	d, err := coco.Open(AnnotationsPath(dir, cfg), ImagesDir(dir), coco.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Categories()); n != 3 {
		t.Fatalf("%d categories, want 3", n)
	}
	seen := map[int32]int{}
	err = d.Images(context.Background(), 0, func(im *shard.Image) error {
		if n := len(im.Instances); n < 1 || n > 3 {
			t.Errorf("image %d: %d instances, want 1..3", im.ImageID, n)
		}
		f, err := os.Open(filepath.Join(ImagesDir(dir), im.FileName))
		if err != nil {
			return err
		}
		defer f.Close()
		pix, err := jpeg.Decode(f)
		if err != nil {
			return err
		}
		owner := make([]int, im.Width*im.Height)
		for i, in := range im.Instances {
			seen[in.Class]++
			if in.IsCrowd || len(in.Polygons) != 1 || in.Area < 0.02*float32(im.Width)*float32(im.Height) {
				t.Errorf("image %d instance %d: crowd %v, %d polygons, area %v: want one large polygon", im.ImageID, i, in.IsCrowd, len(in.Polygons), in.Area)
			}
			b := in.BBox
			for y := range int(im.Height) {
				for _, x := range insideRow(in, im.Width, y) {
					if owner[y*int(im.Width)+x]++; owner[y*int(im.Width)+x] > 1 {
						t.Fatalf("image %d: instance %d covers pixel (%d, %d) of another", im.ImageID, i, x, y)
					}
				}
			}
			// Every outline contains its centre, so the pixel there is the
			// class's colour (give or take JPEG).
			r, g, bl, _ := pix.At(int(b[0]+b[2]/2), int(b[1]+b[3]/2)).RGBA()
			want := easyColors[in.Class]
			for k, v := range []uint32{r >> 8, g >> 8, bl >> 8} {
				if w := []uint8{want.R, want.G, want.B}[k]; math.Abs(float64(v)-float64(w)) > 40 {
					t.Errorf("image %d instance %d: centre colour %d,%d,%d, want about %v", im.ImageID, i, r>>8, g>>8, bl>>8, want)
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Errorf("instances per class %v, want all 3 classes", seen)
	}
	for _, bad := range []Config{{Easy: true, Classes: 5}, {Classes: 2}} {
		if err := Generate(t.TempDir(), bad); err == nil {
			t.Errorf("Generate accepted Easy %v with Classes %d", bad.Easy, bad.Classes)
		}
	}
}

// insideRow lists the pixels of row y that an instance's polygons cover, by
// the drawing rule.
func insideRow(in shard.Instance, w int32, y int) []int {
	var rings [][]float64
	for _, p := range in.Polygons {
		r := make([]float64, len(p))
		for k, v := range p {
			r[k] = float64(v)
		}
		rings = append(rings, r)
	}
	var xs []int
	spans(crossings(nil, rings, float64(y)+0.5), int(w), func(lo, hi int) {
		for x := lo; x < hi; x++ {
			xs = append(xs, x)
		}
	})
	return xs
}
