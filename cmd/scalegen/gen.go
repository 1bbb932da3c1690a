package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"github.com/segpipe/segpipe/formats/rle"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// genConfig describes a many-masks dataset: every image is Side×Side and
// carries PerImage instances, each an ellipse-like 16-vertex polygon. With
// Masks "rle" the instance is written as COCO compressed RLE of exactly
// the pixels whose centres the polygon contains (iscrowd 0, as SA-1B
// stores its masks); with "polygon" the polygon itself is written. The
// same Seed gives the same shapes in both, so the two sets compare the
// cost of one mask of a given area in either encoding.
type genConfig struct {
	Out      string
	Images   int
	Side     int
	PerImage int
	Masks    string
	Seed     uint64
}

func genMain(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	var c genConfig
	fs.StringVar(&c.Out, "out", "", "output `DIR`: annotations/instances_train.json and images/")
	fs.IntVar(&c.Images, "images", 1000, "number of images")
	fs.IntVar(&c.Side, "side", 64, "image side in pixels (images are square)")
	fs.IntVar(&c.PerImage, "per-image", 100, "instances per image")
	fs.StringVar(&c.Masks, "masks", "rle", "instance encoding: rle (COCO compressed RLE, iscrowd 0) or polygon")
	fs.Uint64Var(&c.Seed, "seed", 1, "generator seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case c.Out == "":
		return errors.New("gen: --out is required")
	case c.Images < 1 || c.Side < 8 || c.PerImage < 1:
		return fmt.Errorf("gen: --images %d, --side %d, --per-image %d: want at least 1, 8, 1", c.Images, c.Side, c.PerImage)
	case c.Masks != "rle" && c.Masks != "polygon":
		return fmt.Errorf("gen: --masks %q: want rle or polygon", c.Masks)
	}
	t0 := time.Now()
	if err := generate(c); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "scalegen gen: %d images, %d %s instances in %s (%.1fs)\n",
		c.Images, c.Images*c.PerImage, c.Masks, c.Out, time.Since(t0).Seconds())
	return nil
}

// generate writes c's dataset. Images are drawn from a pool of 16
// pre-encoded JPEGs: their pixels do not matter to any measurement, only
// that each file is a real, decodable image of the stated size.
func generate(c genConfig) error {
	imgDir := filepath.Join(c.Out, "images")
	annDir := filepath.Join(c.Out, "annotations")
	for _, d := range []string{imgDir, annDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	pool, err := jpegPool(c.Side, 16, c.Seed)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(annDir, "instances_train.json"))
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, `{"info":{"description":"scalegen %s, %d per image, seed %d"},"licenses":[],"images":[`, c.Masks, c.PerImage, c.Seed)
	for i := 0; i < c.Images; i++ {
		if i > 0 {
			w.WriteByte(',')
		}
		name := fmt.Sprintf("%09d.jpg", i+1)
		fmt.Fprintf(w, `{"id":%d,"file_name":%q,"width":%d,"height":%d}`, i+1, name, c.Side, c.Side)
		if err := os.WriteFile(filepath.Join(imgDir, name), pool[i%len(pool)], 0o644); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	w.WriteString(`],"annotations":[`)
	var (
		s    shaper
		b    []byte
		id   int64
		rng  = rand.New(rand.NewPCG(c.Seed, 0x5ca1e))
		side = float64(c.Side)
	)
	for i := 0; i < c.Images; i++ {
		for k := 0; k < c.PerImage; k++ {
			m := s.next(rng, c.Side, side)
			id++
			b = b[:0]
			if id > 1 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"id":%d,"image_id":%d,"category_id":%d,"iscrowd":0,"area":%d,"bbox":[%d,%d,%d,%d],"segmentation":`,
				id, i+1, 1+rng.IntN(8), m.area, m.x0, m.y0, m.x1-m.x0+1, m.y1-m.y0+1)
			if c.Masks == "rle" {
				b = fmt.Appendf(b, `{"size":[%d,%d],"counts":"`, c.Side, c.Side)
				b = appendCompressedRLE(b, m.counts)
				b = append(b, `"}}`...)
			} else {
				b = append(b, "[["...)
				for j, v := range m.ring {
					if j > 0 {
						b = append(b, ',')
					}
					b = strconv.AppendFloat(b, v, 'f', 2, 64)
				}
				b = append(b, "]]}"...)
			}
			if _, err := w.Write(b); err != nil {
				return fmt.Errorf("gen: %w", err)
			}
		}
	}
	w.WriteString(`],"categories":[`)
	for k := 1; k <= 8; k++ {
		if k > 1 {
			w.WriteByte(',')
		}
		fmt.Fprintf(w, `{"id":%d,"name":"shape%d","supercategory":"shape"}`, k, k)
	}
	w.WriteString("]}\n")
	if err := w.Flush(); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	return f.Close()
}

// jpegPool encodes n different side×side images of a few coloured blocks.
func jpegPool(side, n int, seed uint64) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 0x1ead))
	out := make([][]byte, n)
	for i := range out {
		img := image.NewRGBA(image.Rect(0, 0, side, side))
		for b := 0; b < 6; b++ {
			c := color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255}
			x0, y0 := rng.IntN(side), rng.IntN(side)
			x1, y1 := x0+1+rng.IntN(side-x0), y0+1+rng.IntN(side-y0)
			for y := y0; y < y1; y++ {
				for x := x0; x < x1; x++ {
					img.SetRGBA(x, y, c)
				}
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			return nil, fmt.Errorf("gen: encode: %w", err)
		}
		out[i] = buf.Bytes()
	}
	return out, nil
}

// mask is one generated instance: its polygon (flat x,y), the COCO
// column-major run lengths of the pixels whose centres it contains, the
// pixel count and the pixel bounds (inclusive).
type mask struct {
	ring           []float64
	counts         []uint32
	area           int
	x0, y0, x1, y1 int
}

// shaper draws masks, reusing its buffers.
type shaper struct {
	m    mask
	ys   []float64
	col  []bool
	bits []bool
}

// next draws a rotated ellipse (16 vertices, radii 2 to side/6, clamped to
// the image) with at least one pixel, and its run lengths.
func (s *shaper) next(rng *rand.Rand, n int, side float64) *mask {
	for {
		cx, cy := rng.Float64()*side, rng.Float64()*side
		rmax := max(side/6, 3)
		rx, ry := 2+rng.Float64()*(rmax-2), 2+rng.Float64()*(rmax-2)
		th := rng.Float64() * math.Pi
		s.m.ring = s.m.ring[:0]
		for k := 0; k < 16; k++ {
			a := 2 * math.Pi * float64(k) / 16
			ex, ey := rx*math.Cos(a), ry*math.Sin(a)
			x := cx + ex*math.Cos(th) - ey*math.Sin(th)
			y := cy + ex*math.Sin(th) + ey*math.Cos(th)
			s.m.ring = append(s.m.ring, math.Round(min(max(x, 0), side)*100)/100, math.Round(min(max(y, 0), side)*100)/100)
		}
		if s.rasterise(n) > 0 {
			return &s.m
		}
	}
}

// rasterise fills s.m.counts, area and bounds: pixel (x, y) is ON iff its
// centre is inside the ring by the even-odd rule.
func (s *shaper) rasterise(n int) int {
	if cap(s.bits) < n*n {
		s.bits = make([]bool, n*n)
	}
	s.bits = s.bits[:n*n]
	clear(s.bits)
	m := &s.m
	m.area, m.x0, m.y0, m.x1, m.y1 = 0, n, n, -1, -1
	r := m.ring
	for x := 0; x < n; x++ {
		px := float64(x) + 0.5
		s.ys = s.ys[:0]
		for i := 0; i < len(r); i += 2 {
			j := (i + 2) % len(r)
			xa, ya, xb, yb := r[i], r[i+1], r[j], r[j+1]
			if (xa <= px) != (xb <= px) {
				s.ys = append(s.ys, ya+(px-xa)*(yb-ya)/(xb-xa))
			}
		}
		sort.Float64s(s.ys)
		for k := 0; k+1 < len(s.ys); k += 2 {
			lo := max(int(math.Ceil(s.ys[k]-0.5)), 0)
			hi := min(int(math.Ceil(s.ys[k+1]-0.5)), n) // rows with centre < ys[k+1]
			for y := lo; y < hi; y++ {
				s.bits[x*n+y] = true
				m.area++
				m.x0, m.x1 = min(m.x0, x), max(m.x1, x)
				m.y0, m.y1 = min(m.y0, y), max(m.y1, y)
			}
		}
	}
	m.counts = m.counts[:0]
	cur, run := false, uint32(0)
	for _, v := range s.bits {
		if v != cur {
			m.counts = append(m.counts, run)
			cur, run = v, 0
		}
		run++
	}
	m.counts = append(m.counts, run)
	return m.area
}

// appendCompressedRLE appends COCO's compressed string form of counts
// (rle.AppendEncode, pycocotools' rleToString), escaped for a JSON
// string: of the characters the encoding uses ('0' to 'o'), only the
// backslash needs it.
func appendCompressedRLE(b []byte, counts []uint32) []byte {
	start := len(b)
	b = rle.AppendEncode(b, counts)
	if bytes.IndexByte(b[start:], '\\') < 0 {
		return b
	}
	enc := append([]byte(nil), b[start:]...)
	b = b[:start]
	for _, c := range enc {
		if c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}
