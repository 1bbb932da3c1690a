package train

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/segpipe/segpipe/internal/atomicfile"
)

// The curves are drawn with the standard image packages and x/image's
// built-in bitmap font (already a dependency): a dozen line charts do
// not justify a plotting library and its transitive modules.

const (
	panelW, panelH = 320, 210
	plotCols       = 4
)

type series struct {
	title string
	col   int // index into Epoch.row()
}

var panels = []series{
	{"train/box_loss", 1}, {"train/seg_loss", 2}, {"train/cls_loss", 3}, {"train/dfl_loss", 4},
	{"train/sem_loss", 5}, {"mAP50(B)", 6}, {"mAP50-95(B)", 7}, {"mAP50(M)", 8},
	{"mAP50-95(M)", 9}, {"lr", 10}, {"images/s", 12}, {"loader stall s", 13},
}

var (
	lineColor = color.RGBA{31, 119, 180, 255}
	axisColor = color.RGBA{90, 90, 90, 255}
	gridColor = color.RGBA{225, 225, 225, 255}
)

// writePlot draws one panel per curve against the epoch.
func writePlot(path string, hist []Epoch) error {
	rows := (len(panels) + plotCols - 1) / plotCols
	im := image.NewRGBA(image.Rect(0, 0, plotCols*panelW, rows*panelH))
	draw.Draw(im, im.Bounds(), image.White, image.Point{}, draw.Src)
	for i, p := range panels {
		var xs, ys []float64
		for _, e := range hist {
			v := e.row()[p.col]
			if v < 0 && p.col >= 6 && p.col <= 9 { // not validated
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			xs, ys = append(xs, float64(e.Epoch)), append(ys, v)
		}
		drawPanel(im, image.Rect((i%plotCols)*panelW, (i/plotCols)*panelH, (i%plotCols+1)*panelW, (i/plotCols+1)*panelH), p.title, xs, ys)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

func drawPanel(im *image.RGBA, r image.Rectangle, title string, xs, ys []float64) {
	text(im, r.Min.X+panelW/2-len(title)*7/2, r.Min.Y+16, title, color.Black)
	plot := image.Rect(r.Min.X+56, r.Min.Y+26, r.Max.X-12, r.Max.Y-26)
	for k := 0; k <= 4; k++ {
		y := plot.Max.Y - k*plot.Dy()/4
		hline(im, plot.Min.X, plot.Max.X, y, gridColor)
	}
	hline(im, plot.Min.X, plot.Max.X, plot.Max.Y, axisColor)
	vline(im, plot.Min.X, plot.Min.Y, plot.Max.Y, axisColor)
	if len(xs) == 0 {
		text(im, plot.Min.X+10, plot.Min.Y+plot.Dy()/2, "no data", axisColor)
		return
	}
	x0, x1 := xs[0], xs[len(xs)-1]
	y0, y1 := ys[0], ys[0]
	for _, y := range ys {
		y0, y1 = math.Min(y0, y), math.Max(y1, y)
	}
	if x1 == x0 {
		x0, x1 = x0-1, x1+1
	}
	if y1 == y0 {
		y0, y1 = y0-math.Max(math.Abs(y0)*0.1, 1e-9), y1+math.Max(math.Abs(y1)*0.1, 1e-9)
	}
	px := func(x float64) int { return plot.Min.X + int(math.Round((x-x0)/(x1-x0)*float64(plot.Dx()))) }
	py := func(y float64) int { return plot.Max.Y - int(math.Round((y-y0)/(y1-y0)*float64(plot.Dy()))) }
	text(im, r.Min.X+2, plot.Min.Y+10, label(y1), axisColor)
	text(im, r.Min.X+2, plot.Max.Y, label(y0), axisColor)
	text(im, plot.Min.X, plot.Max.Y+14, label(x0), axisColor)
	xl := label(x1)
	text(im, plot.Max.X-len(xl)*7, plot.Max.Y+14, xl, axisColor)
	text(im, plot.Min.X+plot.Dx()/2-14, plot.Max.Y+14, "epoch", axisColor)
	for i := range xs {
		if i > 0 {
			line(im, px(xs[i-1]), py(ys[i-1]), px(xs[i]), py(ys[i]), lineColor)
		}
		dot(im, px(xs[i]), py(ys[i]), lineColor)
	}
}

func label(v float64) string {
	if v != 0 && (math.Abs(v) < 1e-2 || math.Abs(v) >= 1e5) {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func text(im *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: im, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(im *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		im.SetRGBA(x, y, c)
	}
}

func vline(im *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		im.SetRGBA(x, y, c)
	}
}

func dot(im *image.RGBA, x, y int, c color.RGBA) {
	for dy := -1; dy <= 1; dy++ {
		for dx := -1; dx <= 1; dx++ {
			im.SetRGBA(x+dx, y+dy, c)
		}
	}
}

// line is Bresenham's.
func line(im *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		im.SetRGBA(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
