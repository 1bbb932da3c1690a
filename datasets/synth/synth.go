package synth

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/segpipe/segpipe/formats/rle"
	"github.com/segpipe/segpipe/internal/atomicfile"
)

// Config controls Generate. Zero fields take the documented defaults.
type Config struct {
	Images int    // number of images; default 100
	Seed   uint64 // generator seed
	Split  string // annotation file is annotations/instances_<Split>.json; default "train"

	// AnnotationsOnly writes the annotation file without encoding any
	// image, for parser benchmarks at COCO scale (118k images take
	// minutes to encode; their annotations take seconds).
	AnnotationsOnly bool

	// MaxSide is the longer image side in pixels; default 640 (COCO's).
	// Shapes scale with it, so the size spread stays COCO-like.
	MaxSide int
	// MeanInstances is the mean number of instances per image; default 7.3.
	MeanInstances float64
	// Quality is the JPEG quality; default 90.
	Quality int
	// Workers encode images in parallel; <= 0 means GOMAXPROCS.
	Workers int

	// Easy replaces the COCO-like statistics with a set that a model
	// learns from random weights in minutes on a CPU (the quickstart's):
	// a plain background, 1–3 large shapes that never overlap (so every
	// mask is whole), and Classes categories told apart by outline and
	// colour. MeanInstances does not apply.
	Easy bool
	// Classes is an Easy set's category count, 1..4; default 2.
	Classes int
}

func (c Config) withDefaults() Config {
	if c.Images == 0 {
		c.Images = 100
	}
	if c.Split == "" {
		c.Split = "train"
	}
	if c.MaxSide == 0 {
		c.MaxSide = 640
	}
	if c.MeanInstances == 0 {
		c.MeanInstances = 7.3
	}
	if c.Quality == 0 {
		c.Quality = 90
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.Easy && c.Classes == 0 {
		c.Classes = 2
	}
	return c
}

// AnnotationsPath is where Generate writes the annotation file.
func AnnotationsPath(dir string, cfg Config) string {
	return filepath.Join(dir, "annotations", "instances_"+cfg.withDefaults().Split+".json")
}

// ImagesDir is where Generate writes the images.
func ImagesDir(dir string) string { return filepath.Join(dir, "images") }

// Generate writes a dataset under dir: annotations/instances_<Split>.json
// and images/<id>.jpg. Existing files of the same names are replaced.
func Generate(dir string, cfg Config) error {
	cfg = cfg.withDefaults()
	if cfg.Images < 0 || cfg.MaxSide < 16 || cfg.MeanInstances < 0 || cfg.Quality < 1 || cfg.Quality > 100 ||
		(cfg.Easy && (cfg.Classes < 1 || cfg.Classes > len(easyCategories))) || (!cfg.Easy && cfg.Classes != 0) {
		return fmt.Errorf("synth: invalid config %+v (need Images >= 0, MaxSide >= 16, Quality 1..100, Classes 1..%d with Easy, 0 without)", cfg, len(easyCategories))
	}
	if err := os.MkdirAll(filepath.Join(dir, "annotations"), 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	ids := imageIDs(cfg)
	if !cfg.AnnotationsOnly {
		if err := os.MkdirAll(ImagesDir(dir), 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
		if err := writeImages(dir, cfg, ids); err != nil {
			return err
		}
	}
	return writeAnnotations(AnnotationsPath(dir, cfg), cfg, ids)
}

// imageIDs is a seeded permutation of 1..N: image i has id ids[i].
func imageIDs(cfg Config) []int64 {
	ids := make([]int64, cfg.Images)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	r := rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64))
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

func fileName(id int64) string { return fmt.Sprintf("%012d.jpg", id) }

// shape is one generated instance.
type shape struct {
	cat   int // index into the set's categories (Config.categories)
	crowd bool
	rings [][]float64 // pixel coordinates, rounded to 2 decimals
	rle   []uint32    // crowd only
	bbox  [4]float64
	area  float64
}

// spec is one generated image.
type spec struct {
	w, h   int
	shapes []shape
}

// sizes are COCO's commonest image shapes as (long, short) ratios of 640.
var sizes = [][2]int{{640, 480}, {480, 640}, {640, 427}, {427, 640}, {640, 425}, {640, 360}, {500, 375}, {640, 640}}

// genSpec draws image i's size and instances. It is a pure function of
// (cfg, i), so the JSON pass and the drawing pass agree.
func genSpec(cfg Config, i int) spec {
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	sz := sizes[r.IntN(len(sizes))]
	scale := float64(cfg.MaxSide) / 640
	sp := spec{w: max(8, int(float64(sz[0])*scale)), h: max(8, int(float64(sz[1])*scale))}
	if cfg.Easy {
		sp.shapes = easyShapes(r, cfg.Classes, sp.w, sp.h)
		return sp
	}
	n := 0
	if r.Float64() >= 0.01 && cfg.MeanInstances > 0 {
		// 1 + geometric: COCO's many-few, few-many shape.
		p := 1 / cfg.MeanInstances
		n = 1
		for n < 60 && r.Float64() > p {
			n++
		}
	}
	for range n {
		sp.shapes = append(sp.shapes, genShape(r, sp.w, sp.h, scale))
	}
	return sp
}

func genShape(r *rand.Rand, w, h int, scale float64) shape {
	s := shape{cat: r.IntN(len(cocoCategories))}
	// COCO's size classes by area fraction, side lengths at 640 px.
	var lo, hi float64
	switch u := r.Float64(); {
	case u < 0.41:
		lo, hi = 4, 32
	case u < 0.75:
		lo, hi = 32, 96
	default:
		lo, hi = 96, 400
	}
	side := math.Exp(math.Log(lo)+r.Float64()*(math.Log(hi)-math.Log(lo))) * scale
	side = math.Min(side, 0.95*float64(min(w, h)))
	area := side * side
	s.crowd = r.Float64() < 0.01
	parts := 1
	if !s.crowd && r.Float64() < 0.12 {
		parts = 2 + r.IntN(2)
	}
	cx := side/2 + r.Float64()*math.Max(0, float64(w)-side)
	cy := side/2 + r.Float64()*math.Max(0, float64(h)-side)
	for k := range parts {
		px, py := cx, cy
		if k > 0 {
			px += (r.Float64() - 0.5) * side
			py += (r.Float64() - 0.5) * side
		}
		s.rings = append(s.rings, star(r, px, py, area/float64(parts), w, h))
	}
	if s.crowd {
		s.rle = columnRLE(s.rings, w, h)
		s.area = float64(rle.Area(s.rle))
		s.bbox = rleBBox(s.rle, h)
		s.rings = nil
		return s
	}
	s.measure()
	return s
}

// measure sets a polygon shape's area and bounding box from its rings.
func (s *shape) measure() {
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, ring := range s.rings {
		s.area += shoelace(ring)
		for j := 0; j < len(ring); j += 2 {
			minX, maxX = math.Min(minX, ring[j]), math.Max(maxX, ring[j])
			minY, maxY = math.Min(minY, ring[j+1]), math.Max(maxY, ring[j+1])
		}
	}
	s.bbox = [4]float64{minX, minY, round2(maxX - minX), round2(maxY - minY)}
	s.area = round2(s.area)
}

// ringLen draws a vertex count: log-normal, median 15, p95 50.
func ringLen(r *rand.Rand) int {
	const mu, sigma = 2.70805, 0.7319 // ln 15; ln(50/15)/1.645
	n := int(math.Round(math.Exp(mu + sigma*r.NormFloat64())))
	return min(max(n, 3), 400)
}

// star is a simple polygon (star-shaped around its centre, so never
// self-intersecting) of about the given area, clamped to the image.
func star(r *rand.Rand, cx, cy, area float64, w, h int) []float64 {
	n := ringLen(r)
	ang := make([]float64, n)
	for i := range ang {
		ang[i] = r.Float64() * 2 * math.Pi
	}
	slices.Sort(ang)
	rad := make([]float64, n)
	var unit float64 // area at radius scale 1
	for i := range rad {
		rad[i] = 0.55 + 0.45*r.Float64()
	}
	for i := range n {
		j := (i + 1) % n
		d := ang[j] - ang[i]
		if j == 0 {
			d += 2 * math.Pi
		}
		unit += 0.5 * rad[i] * rad[j] * math.Sin(d)
	}
	k := math.Sqrt(area / math.Max(unit, 1e-3))
	ring := make([]float64, 0, 2*n)
	for i := range n {
		x := clamp(round2(cx+k*rad[i]*math.Cos(ang[i])), 0, float64(w))
		y := clamp(round2(cy+k*rad[i]*math.Sin(ang[i])), 0, float64(h))
		ring = append(ring, x, y)
	}
	return ring
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }

func shoelace(ring []float64) float64 {
	n := len(ring) / 2
	var a float64
	for i := range n {
		j := (i + 1) % n
		a += ring[2*i]*ring[2*j+1] - ring[2*j]*ring[2*i+1]
	}
	return math.Abs(a) / 2
}

// crossings appends to dst the x positions, sorted, where the row y = c
// crosses the rings' edges. An edge counts when exactly one endpoint has
// y <= c, so a vertex on the row is counted once.
func crossings(dst []float64, rings [][]float64, c float64) []float64 {
	dst = dst[:0]
	for _, ring := range rings {
		n := len(ring) / 2
		for i := range n {
			j := (i + 1) % n
			y0, y1 := ring[2*i+1], ring[2*j+1]
			if (y0 <= c) == (y1 <= c) {
				continue
			}
			x0, x1 := ring[2*i], ring[2*j]
			dst = append(dst, x0+(c-y0)*(x1-x0)/(y1-y0))
		}
	}
	slices.Sort(dst)
	return dst
}

// spans calls fn(lo, hi) for each run of pixels [lo, hi) along a line whose
// centres are inside the rings (even-odd), clipped to [0, limit).
func spans(xs []float64, limit int, fn func(lo, hi int)) {
	for k := 0; k+1 < len(xs); k += 2 {
		lo := max(int(math.Ceil(xs[k]-0.5)), 0)
		hi := min(int(math.Ceil(xs[k+1]-0.5)), limit)
		if lo < hi {
			fn(lo, hi)
		}
	}
}

// columnRLE is the canonical COCO RLE of the rings' pixels, painted row by
// row with the same rule as draw so a crowd mask is exactly what is drawn.
func columnRLE(rings [][]float64, w, h int) []uint32 {
	mask := make([]byte, w*h)
	var xs []float64
	for y := range h {
		xs = crossings(xs, rings, float64(y)+0.5)
		row := mask[y*w:]
		spans(xs, w, func(lo, hi int) {
			for x := lo; x < hi; x++ {
				row[x] = 1
			}
		})
	}
	r, err := rle.FromMask(mask, h, w)
	if err != nil {
		panic(err) // unreachable: the mask has h*w bytes by construction
	}
	return r.Counts
}

// rleBBox is the bounding box (x, y, w, h) of an RLE's foreground.
func rleBBox(counts []uint32, h int) [4]float64 {
	minX, minY, maxX, maxY := math.MaxInt, math.MaxInt, -1, -1
	pos := 0
	for i, c := range counts {
		if i%2 == 1 && c > 0 {
			for p := pos; p < pos+int(c); p++ {
				x, y := p/h, p%h
				minX, maxX = min(minX, x), max(maxX, x)
				minY, maxY = min(minY, y), max(maxY, y)
			}
		}
		pos += int(c)
	}
	if maxX < 0 {
		return [4]float64{}
	}
	return [4]float64{float64(minX), float64(minY), float64(maxX - minX + 1), float64(maxY - minY + 1)}
}

// writeImages draws and encodes every image with cfg.Workers goroutines.
func writeImages(dir string, cfg Config, ids []int64) error {
	next := make(chan int)
	errs := make([]error, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf *image.RGBA
			for i := range next {
				if errs[w] != nil {
					continue
				}
				sp := genSpec(cfg, i)
				buf = draw(buf, sp, cfg, i)
				errs[w] = writeJPEG(filepath.Join(ImagesDir(dir), fileName(ids[i])), buf, cfg.Quality)
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func writeJPEG(path string, img image.Image, quality int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := jpeg.Encode(bw, img, &jpeg.Options{Quality: quality}); err != nil {
		f.Close()
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return nil
}

// draw paints a textured background (plain for an Easy set) and every
// shape, in order, with its category's colour.
func draw(img *image.RGBA, sp spec, cfg Config, i int) *image.RGBA {
	if img == nil || img.Rect.Dx() != sp.w || img.Rect.Dy() != sp.h {
		img = image.NewRGBA(image.Rect(0, 0, sp.w, sp.h))
	}
	r := rand.New(rand.NewPCG(cfg.Seed^0x9e3779b97f4a7c15, uint64(i)))
	colorOf := categoryColor
	if cfg.Easy {
		easyBackground(img, r)
		colorOf = easyColor
	} else {
		texturedBackground(img, r)
	}
	var xs []float64
	for _, s := range sp.shapes {
		c := colorOf(s.cat)
		if s.crowd {
			pos := 0
			for k, cnt := range s.rle {
				if k%2 == 1 {
					for p := pos; p < pos+int(cnt); p++ {
						img.SetRGBA(p/sp.h, p%sp.h, c)
					}
				}
				pos += int(cnt)
			}
			continue
		}
		for y := range sp.h {
			xs = crossings(xs, s.rings, float64(y)+0.5)
			row := img.Pix[y*img.Stride:]
			spans(xs, sp.w, func(lo, hi int) {
				for x := lo; x < hi; x++ {
					row[4*x], row[4*x+1], row[4*x+2] = c.R, c.G, c.B
				}
			})
		}
	}
	return img
}

// texturedBackground is a per-image base colour with gradients and noise,
// so that shapes are not the only structure in an image.
func texturedBackground(img *image.RGBA, r *rand.Rand) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	base := [3]int{r.IntN(128), r.IntN(128), r.IntN(128)}
	for y := range h {
		row := img.Pix[y*img.Stride:]
		for x := range w {
			n := r.Uint32()
			o := 4 * x
			row[o] = uint8(base[0] + (x*64)/w + int(n&15))
			row[o+1] = uint8(base[1] + (y*64)/h + int(n>>4&15))
			row[o+2] = uint8(base[2] + int(n>>8&31))
			row[o+3] = 255
		}
	}
}

func categoryColor(k int) color.RGBA {
	h := uint32(k)*2654435761 + 12345
	return color.RGBA{uint8(64 + h%192), uint8(64 + (h>>8)%192), uint8(64 + (h>>16)%192), 255}
}

// writeAnnotations streams the JSON file: images in generation order,
// annotations interleaved across blocks of 64 images, ids 1.. in write
// order.
func writeAnnotations(path string, cfg Config, ids []int64) error {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	defer f.Abort()
	w := bufio.NewWriterSize(f, 1<<20)
	var b []byte
	b = append(b, `{"info": {"description": "segpipe synthetic COCO-like dataset", "seed": `...)
	b = strconv.AppendUint(b, cfg.Seed, 10)
	b = append(b, "},\n\"images\": [\n"...)
	specs := make([]spec, 0, 64)
	cats := cfg.categories()
	for i := range ids {
		sp := genSpec(cfg, i)
		if i > 0 {
			b = append(b, ",\n"...)
		}
		b = fmt.Appendf(b, `{"id": %d, "file_name": %q, "width": %d, "height": %d}`, ids[i], fileName(ids[i]), sp.w, sp.h)
		if len(b) > 1<<16 {
			w.Write(b)
			b = b[:0]
		}
	}
	b = append(b, "\n],\n\"annotations\": [\n"...)
	annID, crowds := int64(0), 0
	for blk := 0; blk < len(ids); blk += 64 {
		specs = specs[:0]
		end := min(blk+64, len(ids))
		for i := blk; i < end; i++ {
			specs = append(specs, genSpec(cfg, i))
		}
		for k := 0; ; k++ {
			wrote := false
			for j, sp := range specs {
				if k >= len(sp.shapes) {
					continue
				}
				wrote = true
				annID++
				if annID > 1 {
					b = append(b, ",\n"...)
				}
				s := sp.shapes[k]
				if s.crowd {
					crowds++
				}
				b = appendAnn(b, annID, ids[blk+j], cats[s.cat].id, s, crowds%2 == 0, sp.w, sp.h)
			}
			if !wrote {
				break
			}
			if len(b) > 1<<16 {
				w.Write(b)
				b = b[:0]
			}
		}
	}
	b = append(b, "\n],\n\"categories\": [\n"...)
	for k, c := range cats {
		if k > 0 {
			b = append(b, ",\n"...)
		}
		b = fmt.Appendf(b, `{"id": %d, "name": %q, "supercategory": %q}`, c.id, c.name, c.super)
	}
	b = append(b, "\n]}\n"...)
	w.Write(b)
	if err := w.Flush(); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

func appendNum(b []byte, v float64) []byte { return strconv.AppendFloat(b, v, 'f', -1, 64) }

// appendAnn writes one annotation; crowd RLEs alternate between count list
// and compressed string by stringRLE.
func appendAnn(b []byte, id, imageID int64, catID int, s shape, stringRLE bool, w, h int) []byte {
	b = append(b, `{"id": `...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `, "image_id": `...)
	b = strconv.AppendInt(b, imageID, 10)
	b = append(b, `, "category_id": `...)
	b = strconv.AppendInt(b, int64(catID), 10)
	b = append(b, `, "iscrowd": `...)
	if s.crowd {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, `, "area": `...)
	b = appendNum(b, s.area)
	b = append(b, `, "bbox": [`...)
	for k, v := range s.bbox {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendNum(b, v)
	}
	b = append(b, `], "segmentation": `...)
	if s.crowd {
		b = append(b, `{"counts": `...)
		if stringRLE {
			// The alphabet '0'..'o' includes '\\', which JSON escapes.
			b = append(b, '"')
			for _, ch := range rle.AppendEncode(nil, s.rle) {
				if ch == '\\' {
					b = append(b, '\\')
				}
				b = append(b, ch)
			}
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for k, c := range s.rle {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(c), 10)
			}
			b = append(b, ']')
		}
		b = append(b, `, "size": [`...)
		b = strconv.AppendInt(b, int64(h), 10)
		b = append(b, ", "...)
		b = strconv.AppendInt(b, int64(w), 10)
		return append(b, "]}}"...)
	}
	b = append(b, '[')
	for k, ring := range s.rings {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, v := range ring {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendNum(b, v)
		}
		b = append(b, ']')
	}
	return append(b, "]}"...)
}
