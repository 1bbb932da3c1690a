package preview

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"sort"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gomedium"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"

	"github.com/segpipe/segpipe/formats/batch"
)

// Options control a sheet. Zero values take the documented defaults.
type Options struct {
	Tile    int      // tile side in pixels, default 320
	Columns int      // tiles per row, default ⌈√N⌉
	Classes []string // class names by class index; missing ones print as "class k"
	Alpha   float64  // mask overlay opacity in (0,1], default 0.45
	Max     int      // at most this many images (0: all)
}

func (o Options) withDefaults(n int) Options {
	if o.Tile <= 0 {
		o.Tile = 320
	}
	if o.Max > 0 && n > o.Max {
		n = o.Max
	}
	if o.Columns <= 0 {
		o.Columns = max(1, int(math.Ceil(math.Sqrt(float64(n)))))
	}
	if o.Alpha <= 0 || o.Alpha > 1 {
		o.Alpha = 0.45
	}
	o.Max = n
	return o
}

// palette is the 20-colour palette Ultralytics uses for instances: bright,
// mutually distinct, readable on photographs.
var palette = []color.RGBA{
	{0xFF, 0x38, 0x38, 255}, {0xFF, 0x9D, 0x97, 255}, {0xFF, 0x70, 0x1F, 255}, {0xFF, 0xB2, 0x1D, 255},
	{0xCF, 0xD2, 0x31, 255}, {0x48, 0xF9, 0x0A, 255}, {0x92, 0xCC, 0x17, 255}, {0x3D, 0xDB, 0x86, 255},
	{0x1A, 0x93, 0x34, 255}, {0x00, 0xD4, 0xBB, 255}, {0x2C, 0x99, 0xA8, 255}, {0x00, 0xC2, 0xFF, 255},
	{0x34, 0x45, 0x93, 255}, {0x64, 0x73, 0xFF, 255}, {0x00, 0x18, 0xEC, 255}, {0x84, 0x38, 0xFF, 255},
	{0x52, 0x00, 0x85, 255}, {0xCB, 0x38, 0xFF, 255}, {0xFF, 0x95, 0xC8, 255}, {0xFF, 0x37, 0xC7, 255},
}

var (
	bg     = color.RGBA{0x1E, 0x1F, 0x22, 255}
	faceMu sync.Mutex
	faces  = map[float64]font.Face{}
)

func face(size float64) font.Face {
	faceMu.Lock()
	defer faceMu.Unlock()
	if f, ok := faces[size]; ok {
		return f
	}
	ft, err := opentype.Parse(gomedium.TTF)
	if err == nil {
		var f font.Face
		f, err = opentype.NewFace(ft, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
		if err == nil {
			faces[size] = f
			return f
		}
	}
	return nil // the embedded font always parses; without it labels are left out
}

// view is the parts of a batch record a sheet needs.
type view struct {
	n, h, w, hp, wp int
	images          []byte
	masks           []byte
	offs            []int32
	boxes           []float32
	classes         []int32
	ids             []int64
}

func read(rec arrow.RecordBatch) (*view, error) {
	img, err := batch.ImageTensor(rec)
	if err != nil {
		return nil, err
	}
	ms, err := batch.MaskStack(rec)
	if err != nil {
		return nil, err
	}
	if len(img.Shape) != 3 || img.Shape[0] != 3 || len(ms.Shape) != 2 {
		return nil, fmt.Errorf("preview: image shape %v, mask shape %v", img.Shape, ms.Shape)
	}
	v := &view{n: img.Count, h: img.Shape[1], w: img.Shape[2], hp: ms.Shape[0], wp: ms.Shape[1], images: img.Data, masks: ms.Data, offs: ms.Offsets}
	col := func(name string) (arrow.Array, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("preview: no column %s", name)
		}
		return rec.Column(idx[0]), nil
	}
	b, err := col(batch.ColBoxes)
	if err != nil {
		return nil, err
	}
	bl, ok := b.(*array.List)
	if !ok {
		return nil, fmt.Errorf("preview: column %s is %s", batch.ColBoxes, b.DataType())
	}
	fl, ok := bl.ListValues().(*array.FixedSizeList)
	if !ok {
		return nil, fmt.Errorf("preview: column %s holds %s", batch.ColBoxes, bl.ListValues().DataType())
	}
	v.boxes = fl.ListValues().(*array.Float32).Float32Values()
	c, err := col(batch.ColClasses)
	if err != nil {
		return nil, err
	}
	v.classes = c.(*array.List).ListValues().(*array.Int32).Int32Values()
	id, err := col(batch.ColImageID)
	if err != nil {
		return nil, err
	}
	v.ids = id.(*array.Int64).Int64Values()
	sumN := int(v.offs[len(v.offs)-1])
	if len(v.boxes) < 4*sumN || len(v.classes) < sumN || len(v.masks) < sumN*v.hp*v.wp {
		return nil, fmt.Errorf("preview: columns hold fewer than %d instances", sumN)
	}
	return v, nil
}

// order returns the instances of image i, largest mask first.
func (v *view) order(i int) []int {
	lo, hi := int(v.offs[i]), int(v.offs[i+1])
	cells := v.hp * v.wp
	area := make(map[int]int, hi-lo)
	ks := make([]int, 0, hi-lo)
	for k := lo; k < hi; k++ {
		a := 0
		for _, b := range v.masks[k*cells : (k+1)*cells] {
			a += int(b)
		}
		area[k] = a
		ks = append(ks, k)
	}
	sort.SliceStable(ks, func(a, b int) bool { return area[ks[a]] > area[ks[b]] })
	return ks
}

func (v *view) className(k int, names []string) string {
	c := int(v.classes[k])
	if c >= 0 && c < len(names) && names[c] != "" {
		return names[c]
	}
	return fmt.Sprintf("class %d", c)
}

const pad = 6

func newSheet(n int, o Options) *image.RGBA {
	rows := (n + o.Columns - 1) / o.Columns
	cols := min(o.Columns, n)
	r := image.Rect(0, 0, pad+cols*(o.Tile+pad), pad+rows*(o.Tile+pad))
	im := image.NewRGBA(r)
	draw.Draw(im, r, image.NewUniform(bg), image.Point{}, draw.Src)
	return im
}

func (o Options) origin(i int) image.Point {
	return image.Pt(pad+(i%o.Columns)*(o.Tile+pad), pad+(i/o.Columns)*(o.Tile+pad))
}

// start reads a batch for drawing and makes its empty sheet.
func start(rec arrow.RecordBatch, opt Options) (*view, Options, *image.RGBA, error) {
	v, err := read(rec)
	if err != nil {
		return nil, opt, nil, err
	}
	if v.n == 0 {
		return nil, opt, nil, fmt.Errorf("preview: empty batch")
	}
	o := opt.withDefaults(v.n)
	return v, o, newSheet(o.Max, o), nil
}

// Sheet draws the batch as a contact sheet of image tiles with mask
// overlays, outlines, boxes and class names.
func Sheet(rec arrow.RecordBatch, opt Options) (*image.RGBA, error) {
	v, o, sheet, err := start(rec, opt)
	if err != nil {
		return nil, err
	}
	cells := v.hp * v.wp
	s := float64(o.Tile) / float64(max(v.h, v.w)) // tile pixels per canvas pixel
	tw, th := int(float64(v.w)*s), int(float64(v.h)*s)
	label := make([]int32, tw*th)
	for i := 0; i < o.Max; i++ {
		p := o.origin(i)
		img := v.images[i*3*v.h*v.w : (i+1)*3*v.h*v.w]
		plane := v.h * v.w
		// Label each tile pixel with the instance drawn on top there.
		for j := range label {
			label[j] = -1
		}
		ks := v.order(i)
		for rank, k := range ks {
			m := v.masks[k*cells : (k+1)*cells]
			for ty := 0; ty < th; ty++ {
				gy := min(int((float64(ty)+0.5)/s)*v.hp/v.h, v.hp-1)
				row := m[gy*v.wp : (gy+1)*v.wp]
				for tx := 0; tx < tw; tx++ {
					gx := min(int((float64(tx)+0.5)/s)*v.wp/v.w, v.wp-1)
					if row[gx] != 0 {
						label[ty*tw+tx] = int32(rank)
					}
				}
			}
		}
		a := o.Alpha
		for ty := 0; ty < th; ty++ {
			cy := min(int((float64(ty)+0.5)/s), v.h-1)
			for tx := 0; tx < tw; tx++ {
				cx := min(int((float64(tx)+0.5)/s), v.w-1)
				q := cy*v.w + cx
				r, g, b := float64(img[q]), float64(img[plane+q]), float64(img[2*plane+q])
				if l := label[ty*tw+tx]; l >= 0 {
					c := palette[(ks[l]-int(v.offs[i]))%len(palette)]
					edge := tx == 0 || ty == 0 || tx == tw-1 || ty == th-1 ||
						label[ty*tw+tx-1] != l || label[ty*tw+tx+1] != l || label[(ty-1)*tw+tx] != l || label[(ty+1)*tw+tx] != l
					if edge {
						r, g, b = float64(c.R), float64(c.G), float64(c.B)
					} else {
						r, g, b = (1-a)*r+a*float64(c.R), (1-a)*g+a*float64(c.G), (1-a)*b+a*float64(c.B)
					}
				}
				off := sheet.PixOffset(p.X+tx, p.Y+ty)
				sheet.Pix[off], sheet.Pix[off+1], sheet.Pix[off+2], sheet.Pix[off+3] = uint8(r), uint8(g), uint8(b), 255
			}
		}
		tile := image.Rect(p.X, p.Y, p.X+tw, p.Y+th)
		for _, k := range ks {
			c := palette[(k-int(v.offs[i]))%len(palette)]
			bx := v.boxes[4*k : 4*k+4]
			rect := image.Rect(p.X+int(float64(bx[0])*s), p.Y+int(float64(bx[1])*s), p.X+int(float64(bx[2])*s+0.5), p.Y+int(float64(bx[3])*s+0.5))
			box(sheet, rect.Intersect(tile), c, 2)
		}
		for _, k := range ks {
			c := palette[(k-int(v.offs[i]))%len(palette)]
			bx := v.boxes[4*k : 4*k+4]
			tag(sheet, tile, image.Pt(p.X+int(float64(bx[0])*s), p.Y+int(float64(bx[1])*s)), v.className(k, o.Classes), c)
		}
		caption(sheet, tile, fmt.Sprintf("image %d · %d instances", v.ids[i], len(ks)))
	}
	return sheet, nil
}

// GridSheet draws each image's raw mask grid: one block per cell, each
// instance in its colour, overlaps in white, boxes at grid scale.
func GridSheet(rec arrow.RecordBatch, opt Options) (*image.RGBA, error) {
	v, o, sheet, err := start(rec, opt)
	if err != nil {
		return nil, err
	}
	cells := v.hp * v.wp
	s := float64(o.Tile) / float64(max(v.hp, v.wp)) // tile pixels per cell
	tw, th := int(float64(v.wp)*s), int(float64(v.hp)*s)
	count := make([]int, cells)
	owner := make([]int, cells)
	stride := float64(v.h) / float64(v.hp)
	for i := 0; i < o.Max; i++ {
		p := o.origin(i)
		clear(count)
		lo, hi := int(v.offs[i]), int(v.offs[i+1])
		for k := lo; k < hi; k++ {
			for j, b := range v.masks[k*cells : (k+1)*cells] {
				if b != 0 {
					count[j]++
					owner[j] = k - lo
				}
			}
		}
		for ty := 0; ty < th; ty++ {
			gy := min(int(float64(ty)/s), v.hp-1)
			for tx := 0; tx < tw; tx++ {
				gx := min(int(float64(tx)/s), v.wp-1)
				j := gy*v.wp + gx
				c := color.RGBA{0x10, 0x10, 0x12, 255}
				switch {
				case count[j] == 1:
					c = palette[owner[j]%len(palette)]
				case count[j] > 1:
					c = color.RGBA{255, 255, 255, 255}
				case (gx+gy)%2 == 0 && s >= 3:
					c = color.RGBA{0x18, 0x18, 0x1B, 255} // faint checkerboard shows the cells
				}
				sheet.SetRGBA(p.X+tx, p.Y+ty, c)
			}
		}
		tile := image.Rect(p.X, p.Y, p.X+tw, p.Y+th)
		for k := lo; k < hi; k++ {
			bx := v.boxes[4*k : 4*k+4]
			g := s / stride
			rect := image.Rect(p.X+int(float64(bx[0])*g), p.Y+int(float64(bx[1])*g), p.X+int(float64(bx[2])*g+0.5), p.Y+int(float64(bx[3])*g+0.5))
			box(sheet, rect.Intersect(tile), color.RGBA{0xE0, 0xE0, 0xE0, 255}, 1)
		}
		caption(sheet, tile, fmt.Sprintf("image %d · grid %dx%d · %d masks", v.ids[i], v.hp, v.wp, hi-lo))
	}
	return sheet, nil
}

func box(im *image.RGBA, r image.Rectangle, c color.RGBA, t int) {
	if r.Empty() {
		return
	}
	u := image.NewUniform(c)
	for _, e := range []image.Rectangle{
		image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+t), image.Rect(r.Min.X, r.Max.Y-t, r.Max.X, r.Max.Y),
		image.Rect(r.Min.X, r.Min.Y, r.Min.X+t, r.Max.Y), image.Rect(r.Max.X-t, r.Min.Y, r.Max.X, r.Max.Y),
	} {
		draw.Draw(im, e.Intersect(r), u, image.Point{}, draw.Src)
	}
}

// tag writes a class name on a filled label in the instance colour, above
// the box corner when there is room, inside it otherwise.
func tag(im *image.RGBA, tile image.Rectangle, at image.Point, text string, c color.RGBA) {
	f := face(12)
	if f == nil {
		return
	}
	w := font.MeasureString(f, text).Ceil() + 6
	h := f.Metrics().Height.Ceil() + 2
	r := image.Rect(at.X, at.Y-h, at.X+w, at.Y)
	if r.Min.Y < tile.Min.Y {
		r = r.Add(image.Pt(0, h))
	}
	if r.Max.X > tile.Max.X {
		r = r.Sub(image.Pt(r.Max.X-tile.Max.X, 0))
	}
	r = r.Intersect(tile)
	draw.Draw(im, r, image.NewUniform(c), image.Point{}, draw.Src)
	ink := color.RGBA{255, 255, 255, 255}
	if 0.299*float64(c.R)+0.587*float64(c.G)+0.114*float64(c.B) > 150 {
		ink = color.RGBA{0, 0, 0, 255}
	}
	d := font.Drawer{Dst: clip{im, r}, Src: image.NewUniform(ink), Face: f,
		Dot: fixed.P(r.Min.X+3, r.Min.Y+f.Metrics().Ascent.Ceil()+1)}
	d.DrawString(text)
}

// caption writes a line on a dark band at the bottom of a tile.
func caption(im *image.RGBA, tile image.Rectangle, text string) {
	f := face(12)
	if f == nil {
		return
	}
	h := f.Metrics().Height.Ceil() + 4
	band := image.Rect(tile.Min.X, tile.Max.Y-h, tile.Max.X, tile.Max.Y)
	draw.DrawMask(im, band, image.NewUniform(color.RGBA{0, 0, 0, 255}), image.Point{}, image.NewUniform(color.Alpha{160}), image.Point{}, draw.Over)
	d := font.Drawer{Dst: clip{im, band}, Src: image.NewUniform(color.RGBA{240, 240, 240, 255}), Face: f,
		Dot: fixed.P(band.Min.X+5, band.Min.Y+f.Metrics().Ascent.Ceil()+2)}
	d.DrawString(text)
}

// clip limits drawing to a rectangle.
type clip struct {
	*image.RGBA
	r image.Rectangle
}

func (c clip) Bounds() image.Rectangle { return c.r.Intersect(c.RGBA.Bounds()) }
