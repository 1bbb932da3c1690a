package raster

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/maskwin"
)

// Grid is the prototype grid: Rows×Cols cells, each Stride canvas pixels
// square. Cell (r, c) has its centre at ((c+0.5)·Stride, (r+0.5)·Stride).
type Grid struct {
	Rows, Cols, Stride int
}

// NewGrid returns the grid of a w×h canvas at the given stride:
// Cols = w/stride and Rows = h/stride, rounded down.
func NewGrid(w, h, stride int) (Grid, error) {
	g := Grid{Stride: stride}
	if stride > 0 {
		g.Rows, g.Cols = h/stride, w/stride
	}
	if err := g.check(); err != nil {
		return Grid{}, fmt.Errorf("canvas %dx%d: %w", w, h, err)
	}
	return g, nil
}

// Cells returns Rows·Cols, the length of one dense mask.
func (g Grid) Cells() int { return g.Rows * g.Cols }

// ErrGrid reports a grid with a non-positive stride, a negative size, more
// rows or columns than an int32 Window can address, or more cells than an
// int can count.
var ErrGrid = errors.New("raster: invalid grid")

func (g Grid) check() error {
	if g.Stride <= 0 || g.Rows < 0 || g.Cols < 0 || g.Rows > math.MaxInt32 || g.Cols > math.MaxInt32 ||
		(g.Rows > 0 && g.Cols > math.MaxInt/g.Rows) {
		return fmt.Errorf("%w: rows %d cols %d stride %d", ErrGrid, g.Rows, g.Cols, g.Stride)
	}
	return nil
}

// Window is the compact form of one instance mask: a W×H block of cells
// whose top-left cell is (row Y0, column X0), stored row-major as W·H bytes
// elsewhere. It is the smallest block holding every ON cell; an empty mask
// has W = H = 0 and no bytes. Fields are int32 to map onto Arrow int32
// columns without conversion.
type Window struct {
	X0, Y0, W, H int32
}

// WindowsOf views window values as they travel (Arrow int32, four per
// window in Window's field order: x0, y0, w, h) as Windows, without a
// copy. A length that is not a multiple of four is an error.
func WindowsOf(v []int32) ([]Window, error) {
	if len(v)%4 != 0 {
		return nil, fmt.Errorf("raster: %d window values, not 4 per window", len(v))
	}
	if len(v) == 0 {
		return nil, nil
	}
	return unsafe.Slice((*Window)(unsafe.Pointer(unsafe.SliceData(v))), len(v)/4), nil
}

// Size returns the number of mask bytes the window holds.
func (w Window) Size() int { return int(w.W) * int(w.H) }

// span is a run of ON cells [c0, c1) in one grid row.
type span struct {
	row, c0, c1 int32
}

// Rasterizer holds the scratch buffers of rasterisation so that the steady
// state allocates nothing. The zero value is ready to use. A Rasterizer is
// not safe for concurrent use: give each worker goroutine its own.
type Rasterizer struct {
	// Rule is the polygon rule of Dense, Fill and AppendWindow; the zero
	// value is Exact. Crowd RLE masks are sampled the same way under
	// either rule.
	Rule Rule

	spans []span
	xs    []float64
	ones  []uint8
	bits  []uint8

	// Scratch of the Ultralytics rule.
	pts      []int64
	ringOff  []int
	uedges   []uedge
	iv       []ival
	ivTmp    []ival
	ev       []int64
	rowStart []int32
	xing     []ival
	xingTmp  []ival
}

// New returns a ready Rasterizer; it is equivalent to new(Rasterizer).
func New() *Rasterizer { return new(Rasterizer) }

// Dense rasterises the instance (the union of its rings) into dst, which
// must have exactly g.Cells() bytes laid out row-major. Every byte of dst is
// written: 1 for ON cells, 0 elsewhere.
func (z *Rasterizer) Dense(dst []uint8, g Grid, rings [][]float32) error {
	if err := checkDense(dst, g); err != nil {
		return err
	}
	if err := z.ringSpans(g, rings); err != nil {
		return err
	}
	z.fillDense(dst, g)
	return nil
}

// Fill sets the instance's ON cells to 1 in dst (g.Cells() bytes,
// row-major) and leaves every other byte as it was. With a stack the caller
// zeroes once (or gets zeroed from its allocator), Fill into each plane
// writes the mask bytes once instead of twice; masks of several calls
// into one plane accumulate as a union.
func (z *Rasterizer) Fill(dst []uint8, g Grid, rings [][]float32) error {
	if err := checkDense(dst, g); err != nil {
		return err
	}
	if err := z.ringSpans(g, rings); err != nil {
		return err
	}
	z.paint(dst, g)
	return nil
}

// AppendWindow rasterises the instance and appends its Window to wins and
// the window's W·H row-major bytes to data, returning both extended slices.
func (z *Rasterizer) AppendWindow(wins []Window, data []uint8, g Grid, rings [][]float32) ([]Window, []uint8, error) {
	if err := g.check(); err != nil {
		return wins, data, err
	}
	if err := z.ringSpans(g, rings); err != nil {
		return wins, data, err
	}
	w, data := z.fillWindow(data)
	return append(wins, w), data, nil
}

func checkDense(dst []uint8, g Grid) error {
	if err := g.check(); err != nil {
		return err
	}
	if len(dst) != g.Cells() {
		return fmt.Errorf("raster: dense mask has %d bytes, grid %dx%d needs %d", len(dst), g.Rows, g.Cols, g.Cells())
	}
	return nil
}

// Expand writes the dense stack of len(wins) masks into dst, which must
// hold exactly len(wins)·g.Cells() bytes; data holds the windows' bytes
// back to back, as AppendWindow produced them. Windows that do not fit the
// grid or data too short for the windows are errors, never panics.
func Expand(dst []uint8, g Grid, wins []Window, data []uint8) error {
	if err := g.check(); err != nil {
		return err
	}
	p := g.Cells()
	if len(wins) > 0 && p > 0 && len(wins) > math.MaxInt/p || len(dst) != len(wins)*p {
		return fmt.Errorf("raster: dense stack has %d bytes, %d masks of %dx%d need %d", len(dst), len(wins), g.Rows, g.Cols, len(wins)*p)
	}
	// Validate everything first, so that an error leaves dst untouched,
	// then clear the stack in one call: one large clear is far cheaper than
	// one per plane.
	if err := CheckWindows(g.Rows, g.Cols, wins, len(data)); err != nil {
		return err
	}
	clear(dst)
	off := 0
	for i, w := range wins {
		plane := dst[i*p : (i+1)*p]
		ww := int(w.W)
		for r := 0; r < int(w.H); r++ {
			o := (int(w.Y0)+r)*g.Cols + int(w.X0)
			copy(plane[o:o+ww], data[off:off+ww])
			off += ww
		}
	}
	return nil
}

// CheckWindows reports the first window of wins that lies outside a
// rows×cols grid or does not fit dataBytes bytes of window data (the
// windows' w·h bytes back to back, in order), and data left over: what
// Expand refuses, for an expansion done elsewhere (on a device). The rule
// is internal/maskwin's, which a device backend's window table uses too.
func CheckWindows(rows, cols int, wins []Window, dataBytes int) error {
	err := maskwin.Check(rows, cols, len(wins), func(i int) (x0, y0, w, h int) {
		return int(wins[i].X0), int(wins[i].Y0), int(wins[i].W), int(wins[i].H)
	}, dataBytes)
	if err != nil {
		return fmt.Errorf("raster: %w", err)
	}
	return nil
}

// firstCell returns the smallest c in [0, n] whose cell centre
// (c+0.5)·s is >= v, or n when there is none. The estimate from division
// is corrected with the exact comparison the semantics use, so rounding in
// v/s cannot move a boundary.
func firstCell(v float64, n int, s float64) int {
	f := math.Ceil(v/s - 0.5)
	var c int
	switch {
	case f != f: // NaN
		return n
	case f <= 0:
		c = 0
	case f >= float64(n):
		c = n
	default:
		c = int(f)
	}
	for c > 0 && (float64(c-1)+0.5)*s >= v {
		c--
	}
	for c < n && (float64(c)+0.5)*s < v {
		c++
	}
	return c
}

// ringSpans fills z.spans with the ON runs of the instance under z.Rule.
func (z *Rasterizer) ringSpans(g Grid, rings [][]float32) error {
	switch z.Rule {
	case Exact:
		z.polySpans(g, rings)
	case Ultralytics:
		if int64(g.Cols)*int64(g.Stride) > maxUltraCanvas || int64(g.Rows)*int64(g.Stride) > maxUltraCanvas {
			return fmt.Errorf("%w: rows %d cols %d stride %d: canvas over %d px a side for the %s rule", ErrGrid, g.Rows, g.Cols, g.Stride, maxUltraCanvas, z.Rule)
		}
		z.ultraPoints(rings)
		z.ultraSpans(g)
	default:
		return z.Rule.check()
	}
	return nil
}

// polySpans fills z.spans with the ON runs of every ring. Runs of
// different rings may overlap; filling them all gives the union.
func (z *Rasterizer) polySpans(g Grid, rings [][]float32) {
	z.spans = z.spans[:0]
	s := float64(g.Stride)
	for _, ring := range rings {
		n := len(ring) / 2
		if n < 2 {
			continue // a single vertex has only the edge to itself, which never crosses
		}
		ymin, ymax := math.Inf(1), math.Inf(-1)
		for i := 1; i < 2*n; i += 2 {
			y := float64(ring[i])
			if y == y {
				ymin, ymax = min(ymin, y), max(ymax, y)
			}
		}
		if !(ymin < ymax) {
			continue // horizontal or all-NaN: no edge can satisfy (y0 > py) != (y1 > py)
		}
		// Edge y0→y1 crosses row centre py only if min(y0,y1) <= py < max(y0,y1),
		// so rows with py outside [ymin, ymax) have no crossing at all.
		r0, r1 := firstCell(ymin, g.Rows, s), firstCell(ymax, g.Rows, s)
		for r := r0; r < r1; r++ {
			z.rowSpans(ring[:2*n], int32(r), (float64(r)+0.5)*s, g.Cols, s)
		}
	}
}

// rowSpans appends the runs of row r where the classic crossing test is
// odd. A cell at px is inside iff #{xc : px < xc} is odd; with the
// crossings sorted, that count is constant between neighbours, so each run
// lies between two crossings and costs one firstCell at each end.
func (z *Rasterizer) rowSpans(ring []float32, r int32, py float64, cols int, s float64) {
	xs := z.xs[:0]
	n := len(ring)
	x0, y0 := float64(ring[n-2]), float64(ring[n-1])
	for i := 0; i < n; i += 2 {
		x1, y1 := float64(ring[i]), float64(ring[i+1])
		if (y0 > py) != (y1 > py) {
			// Exactly the reference expression, edge from previous to current vertex.
			xc := x0 + (py-y0)*(x1-x0)/(y1-y0)
			if xc == xc { // a NaN crossing never satisfies px < xc
				xs = append(xs, xc)
			}
		}
		x0, y0 = x1, y1
	}
	z.xs = xs
	m := len(xs)
	if m == 0 {
		return
	}
	if m == 2 {
		if xs[1] < xs[0] {
			xs[0], xs[1] = xs[1], xs[0]
		}
	} else {
		insertionSort(xs)
	}
	// k = #{xc <= px}; ON iff m-k is odd, for px in [xs[k-1], xs[k]).
	prev := 0 // firstCell(xs[k-1]), with xs[-1] = -Inf
	for k := 0; k < m; k++ {
		c := firstCell(xs[k], cols, s)
		if (m-k)&1 == 1 && c > prev {
			z.spans = append(z.spans, span{r, int32(prev), int32(c)})
		}
		prev = c
	}
}

func insertionSort(a []float64) {
	if len(a) > 24 {
		slices.Sort(a)
		return
	}
	for i := 1; i < len(a); i++ {
		v := a[i]
		j := i
		for j > 0 && a[j-1] > v {
			a[j] = a[j-1]
			j--
		}
		a[j] = v
	}
}

func (z *Rasterizer) ensureOnes(n int) []uint8 {
	if len(z.ones) < n {
		z.ones = make([]uint8, n)
		for i := range z.ones {
			z.ones[i] = 1
		}
	}
	return z.ones
}

func (z *Rasterizer) fillDense(dst []uint8, g Grid) {
	clear(dst)
	z.paint(dst, g)
}

func (z *Rasterizer) paint(dst []uint8, g Grid) {
	ones := z.ensureOnes(g.Cols)
	for _, sp := range z.spans {
		o := int(sp.row) * g.Cols
		copy(dst[o+int(sp.c0):o+int(sp.c1)], ones)
	}
}

// fillWindow appends the tight window of z.spans to data.
func (z *Rasterizer) fillWindow(data []uint8) (Window, []uint8) {
	if len(z.spans) == 0 {
		return Window{}, data
	}
	rmin, rmax := int32(math.MaxInt32), int32(-1)
	cmin, cmax := int32(math.MaxInt32), int32(-1)
	for _, sp := range z.spans {
		rmin, rmax = min(rmin, sp.row), max(rmax, sp.row)
		cmin, cmax = min(cmin, sp.c0), max(cmax, sp.c1)
	}
	w := Window{X0: cmin, Y0: rmin, W: cmax - cmin, H: rmax - rmin + 1}
	n := w.Size()
	base := len(data)
	data = slices.Grow(data, n)[:base+n]
	out := data[base:]
	clear(out)
	ones := z.ensureOnes(int(w.W))
	for _, sp := range z.spans {
		o := int(sp.row-rmin)*int(w.W) - int(cmin)
		copy(out[o+int(sp.c0):o+int(sp.c1)], ones)
	}
	return w, data
}

// ExpandWindows writes the dense {0,1} stack of a batch's windowed masks
// (batch.MaskWindowsOf) into dst, grown when its capacity is short, and
// returns it: each instance's window of mw.Data placed on the
// mw.Rows×mw.Cols grid, zero elsewhere. Windows outside the grid, or data
// that does not match them, are refused (Expand's checks). The one host
// expansion of the windowed form, for the remote client and the trainer.
func ExpandWindows(dst []byte, mw batch.MaskWindows) ([]byte, error) {
	wins, err := WindowsOf(mw.Windows)
	if err != nil {
		return dst, err
	}
	n := len(wins) * mw.Rows * mw.Cols
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if err := Expand(dst, Grid{Rows: mw.Rows, Cols: mw.Cols, Stride: 1}, wins, mw.Data); err != nil {
		return dst, fmt.Errorf("masks: %w", err)
	}
	return dst, nil
}
