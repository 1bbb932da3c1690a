package augment

import (
	"fmt"
	"math"
	"sync"
)

// Render writes the sample's output image into dst as CHW RGB planes of
// p.Out×p.Out (len 3·s·s), BGR when p.BGR. Every output pixel is computed once: its centre
// is mapped back through M⁻¹ to the source canvas, assigned to the tile
// whose visible rectangle holds it (fill colour when none), mapped into
// that tile's original image and sampled bilinearly (edge pixels
// replicated), then jittered in HSV. Neither the resized images nor the
// 2s×2s mosaic canvas are ever built. Outside the plan's live W×H (a
// NewRectPlan's) every pixel is fill.
func Render(dst []byte, p *Plan, tiles []Tile, fillv uint8) error {
	if err := render(dst, p, tiles, fillv); err != nil {
		return err
	}
	fillOutside(dst, p, fillv)
	return nil
}

// fillOutside sets every pixel of dst outside p's live W×H to v.
func fillOutside(dst []byte, p *Plan, v uint8) {
	s := p.Out
	w, h := p.live()
	if w >= s && h >= s {
		return
	}
	for c := range 3 {
		plane := dst[c*s*s : (c+1)*s*s]
		for y := range h {
			fill(plane[y*s+w:(y+1)*s], v)
		}
		fill(plane[h*s:], v)
	}
}

func render(dst []byte, p *Plan, tiles []Tile, fill uint8) error {
	s := p.Out
	ss := s * s
	if len(dst) != 3*ss {
		return fmt.Errorf("augment: render into %d bytes, need %d", len(dst), 3*ss)
	}
	if len(tiles) != p.NTiles {
		return fmt.Errorf("augment: plan for %d tiles, got %d", p.NTiles, len(tiles))
	}
	type tileMap struct {
		img                *Image
		x0, y0, x1, y1     float32 // visible rect on the source canvas
		ox, oy, isx, isy   float32 // canvas → image: u = (x-ox)·isx
		maxX, maxY, stride int
	}
	var tm [4]tileMap
	for i := range tiles {
		t := &tm[i]
		t.img = tiles[i].Img
		r := p.Rect[i]
		if t.img == nil || r.Empty() {
			t.img = nil
			continue
		}
		t.x0, t.y0, t.x1, t.y1 = r.X0, r.Y0, r.X1, r.Y1
		pl := p.Place[i]
		t.ox, t.oy = float32(pl[2]), float32(pl[5])
		t.isx, t.isy = float32(1/pl[0]), float32(1/pl[4])
		t.maxX, t.maxY, t.stride = t.img.W-1, t.img.H-1, 3*t.img.W
		if len(t.img.Pix) < t.img.H*t.stride {
			return fmt.Errorf("augment: tile %d: %d pixel bytes for %dx%d", i, len(t.img.Pix), t.img.W, t.img.H)
		}
	}
	var tab *hsvTable
	if p.hsv.on {
		tab = hsvTables.Get().(*hsvTable)
		defer hsvTables.Put(tab)
		tab.build(&p.hsv)
	}
	fr, fg, fb := fill, fill, fill
	R, G, B := dst[:ss], dst[ss:2*ss], dst[2*ss:]
	if p.BGR {
		// Every step below treats its three planes as red, green and blue
		// by role, so writing red to the last plane and blue to the first
		// is the swap, at no cost.
		R, B = B, R
	}
	mi := p.Minv
	proj := mi[6] != 0 || mi[7] != 0 || mi[8] != 1
	if !proj && !forcePerPixel {
		// The span path jitters each sampled span while it is still in L1
		// and fills with the jittered fill colour: fill pixels (the mosaic's
		// borders) skip the per-pixel HSV conversion. Same bytes as
		// jittering whole rows.
		hr, hg, hb := fr, fg, fb
		if tab != nil {
			hr, hg, hb = tab.apply(fr, fg, fb)
		}
		var spans [4]span
		scp := rowScratch.Get().(*[]uint32)
		sc := *scp
		defer func() { *scp = sc; rowScratch.Put(scp) }()
		for oy := 0; oy < s; oy++ {
			qy := float64(oy) + 0.5
			cx0 := float64(mi[0]*0.5) + float64(mi[1]*qy) + mi[2]
			cy0 := float64(mi[3]*0.5) + float64(mi[4]*qy) + mi[5]
			ns := 0
			for k := 0; k < p.NTiles; k++ {
				t := &tm[k]
				if t.img == nil {
					continue
				}
				lo, hi := interval(cx0, mi[0], cy0, mi[3], t.x0, t.x1, t.y0, t.y1, s)
				if lo < hi {
					spans[ns] = span{lo, hi, k}
					ns++
				}
			}
			sortSpans(spans[:ns])
			row := oy * s
			x := 0
			for _, sp := range spans[:ns] {
				fillRow(R[row+x:row+sp.lo], G[row+x:row+sp.lo], B[row+x:row+sp.lo], hr, hg, hb)
				t := &tm[sp.tile]
				// Source position in 48.16 fixed point, stepped per pixel.
				ux := float64(((cx0+float64(float64(sp.lo)*mi[0]))-float64(t.ox))*float64(t.isx)) - 0.5
				uy := float64(((cy0+float64(float64(sp.lo)*mi[3]))-float64(t.oy))*float64(t.isy)) - 0.5
				U, V := int64(math.Round(ux*65536)), int64(math.Round(uy*65536))
				dU, dV := int64(math.Round(mi[0]*float64(t.isx)*65536)), int64(math.Round(mi[3]*float64(t.isy)*65536))
				if dV == 0 && !forceGeneralSpan {
					sc = sampleSpanRow(R[row+sp.lo:row+sp.hi], G[row+sp.lo:row+sp.hi], B[row+sp.lo:row+sp.hi], t.img.Pix, t.stride, t.maxX, t.maxY, U, V, dU, sc)
				} else {
					sampleSpan(R[row+sp.lo:row+sp.hi], G[row+sp.lo:row+sp.hi], B[row+sp.lo:row+sp.hi], t.img.Pix, t.stride, t.maxX, t.maxY, U, V, dU, dV)
				}
				if tab != nil {
					tab.applyRow(R[row+sp.lo:row+sp.hi], G[row+sp.lo:row+sp.hi], B[row+sp.lo:row+sp.hi])
				}
				x = sp.hi
			}
			fillRow(R[row+x:row+s], G[row+x:row+s], B[row+x:row+s], hr, hg, hb)
		}
		return nil
	}
	xc, yc := float32(p.Xc), float32(p.Yc)
	mosaic := p.NTiles == 4
	for oy := 0; oy < s; oy++ {
		qy := float64(oy) + 0.5
		X := float64(mi[0]*0.5) + float64(mi[1]*qy) + mi[2]
		Y := float64(mi[3]*0.5) + float64(mi[4]*qy) + mi[5]
		Z := float64(mi[6]*0.5) + float64(mi[7]*qy) + mi[8]
		row := oy * s
		for ox := 0; ox < s; ox++ {
			var cx, cy float32
			if proj {
				cx, cy = float32(X/Z), float32(Y/Z)
			} else {
				cx, cy = float32(X), float32(Y)
			}
			X += mi[0]
			Y += mi[3]
			Z += mi[6]
			k := 0
			if mosaic {
				if cx >= xc {
					k = 1
				}
				if cy >= yc {
					k += 2
				}
			}
			t := &tm[k]
			var r, g, b uint8
			if t.img == nil || !(cx >= t.x0 && cx < t.x1 && cy >= t.y0 && cy < t.y1) {
				R[row+ox], G[row+ox], B[row+ox] = fr, fg, fb
				continue
			}
			fx := float32((cx-t.ox)*t.isx) - 0.5
			fy := float32((cy-t.oy)*t.isy) - 0.5
			x0 := int(fx+1) - 1 // floor for fx ≥ -1
			y0 := int(fy+1) - 1
			wx := uint32((fx - float32(x0)) * 256)
			wy := uint32((fy - float32(y0)) * 256)
			x1, y1 := x0+1, y0+1
			if x0 < 0 {
				x0 = 0
			}
			if y0 < 0 {
				y0 = 0
			}
			if x1 > t.maxX {
				x1 = t.maxX
				if x0 > t.maxX {
					x0 = t.maxX
				}
			}
			if y1 > t.maxY {
				y1 = t.maxY
				if y0 > t.maxY {
					y0 = t.maxY
				}
			}
			pix := t.img.Pix
			a := y0*t.stride + 3*x0
			bb := y0*t.stride + 3*x1
			c := y1*t.stride + 3*x0
			d := y1*t.stride + 3*x1
			p00, p01, p10, p11 := pix[a:a+3:a+3], pix[bb:bb+3:bb+3], pix[c:c+3:c+3], pix[d:d+3:d+3]
			ix, iy := 256-wx, 256-wy
			r = uint8(((uint32(p00[0])*ix+uint32(p01[0])*wx)*iy + (uint32(p10[0])*ix+uint32(p11[0])*wx)*wy + 1<<15) >> 16)
			g = uint8(((uint32(p00[1])*ix+uint32(p01[1])*wx)*iy + (uint32(p10[1])*ix+uint32(p11[1])*wx)*wy + 1<<15) >> 16)
			b = uint8(((uint32(p00[2])*ix+uint32(p01[2])*wx)*iy + (uint32(p10[2])*ix+uint32(p11[2])*wx)*wy + 1<<15) >> 16)
			R[row+ox], G[row+ox], B[row+ox] = r, g, b
		}
		if tab != nil { // per finished row, fill pixels included
			tab.applyRow(R[row:row+s], G[row:row+s], B[row:row+s])
		}
	}
	return nil
}

// forceGeneralSpan makes the span path use sampleSpan for rows with a
// constant source row too; tests compare sampleSpanRow against it.
var forceGeneralSpan bool

// rowScratch holds the vertically blended source row of sampleSpanRow.
var rowScratch = sync.Pool{New: func() any { return new([]uint32) }}

// sampleSpanRow is sampleSpan for dV = 0 (no rotation or shear: every
// output row reads one pair of source rows). It first blends the two
// source rows vertically over the columns the span touches, then each
// output pixel blends two of those horizontally: 6 multiplies per pixel
// and 6 per source column instead of 18 per pixel. The integer sums are
// those of sampleSpan regrouped, so the output is bit-identical. sc is
// scratch space, returned grown as needed.
//
// The blended row is laid out for the horizontal step: per column x and
// channel one word pair (value at x, value at x+1), so that a pixel's two
// taps of a channel are one 32-bit read and one multiply-add of 16-bit
// lanes. The values are stored minus 32768 (v ∈ [0, 65280] as int16);
// hsampleGo adds the offset back. The row's first column pair is preceded
// by (v(xa), v(xa)) and its last is (v(xb), v(xb)): the replicated edge
// columns, so the horizontal step clamps a tap position instead of two.
func sampleSpanRow(r, g, b, pix []byte, stride, maxX, maxY int, U, V, dU int64, sc []uint32) []uint32 {
	n := len(r)
	if n == 0 {
		return sc
	}
	g = g[:n]
	b = b[:n]
	y0 := int(V >> 16)
	wy := uint32(V>>8) & 255
	y1 := y0 + 1
	if uint(y0) >= uint(maxY) {
		y0 = min(max(y0, 0), maxY)
		y1 = min(max(y1, 0), maxY)
	}
	Ue := U + int64(n-1)*dU
	xa := min(max(int(min(U, Ue)>>16), 0), maxX)
	xb := min(max(int(max(U, Ue)>>16)+1, 0), maxX)
	m := 3 * (xb - xa + 1)
	// 93 dwords of slack past the row: the AVX-512 horizontal step loads
	// 96 dwords from any pair (hsample).
	if cap(sc) < m+3+hsampleSlack {
		sc = make([]uint32, m+3, m+m/2+3+hsampleSlack)
	}
	sc = sc[:m+3]
	top := pix[y0*stride+3*xa : y0*stride+3*xb+3]
	bot := pix[y1*stride+3*xa : y1*stride+3*xb+3]
	iy := 256 - wy
	vblend(sc[3:m], top[:m], bot[:m], iy, wy)
	for c := 0; c < 3; c++ {
		v := blend16(top[c], bot[c], iy, wy)
		sc[c] = v | v<<16
		v = blend16(top[m-3+c], bot[m-3+c], iy, wy)
		sc[m+c] = v | v<<16
	}
	hsample(r, g, b, sc, U, dU, xa, maxX)
	return sc
}

// hsampleSlack is how many dwords past the blended row hsample's AVX-512
// kernel may read.
const hsampleSlack = 93

// blend16 is one vertically blended value, offset to int16 range.
func blend16(t, b uint8, iy, wy uint32) uint32 {
	return (uint32(t)*iy + uint32(b)*wy) ^ 0x8000
}

// vblendGo blends two source rows vertically into word pairs: sc[k] holds
// the blends of top[k], bot[k] (low half) and of top[k+3], bot[k+3] (high
// half), each top·iy + bot·wy − 32768 (iy + wy = 256, so each fits in 16
// bits). len(top) and len(bot) are at least len(sc)+3.
func vblendGo(sc []uint32, top, bot []byte, iy, wy uint32) {
	top, bot = top[:len(sc)+3], bot[:len(sc)+3]
	// Each blend is the high half of one pair and the low half of the
	// pair three on: computed once, carried over one column (three values).
	c0, c1, c2 := blend16(top[0], bot[0], iy, wy), blend16(top[1], bot[1], iy, wy), blend16(top[2], bot[2], iy, wy)
	k := 0
	for ; k+3 <= len(sc); k += 3 {
		t, b, d := top[k+3:k+6:k+6], bot[k+3:k+6:k+6], sc[k:k+3:k+3]
		n0, n1, n2 := blend16(t[0], b[0], iy, wy), blend16(t[1], b[1], iy, wy), blend16(t[2], b[2], iy, wy)
		d[0], d[1], d[2] = c0|n0<<16, c1|n1<<16, c2|n2<<16
		c0, c1, c2 = n0, n1, n2
	}
	for ; k < len(sc); k++ {
		sc[k] = blend16(top[k], bot[k], iy, wy) | blend16(top[k+3], bot[k+3], iy, wy)<<16
	}
}

// hsampleGo writes len(r) pixels, each the horizontal blend of two columns
// of the vertically blended row sc (laid out as sampleSpanRow describes,
// its columns starting at xa), from source position U (48.16 fixed point)
// stepping dU; columns outside [0, maxX] are replicated from the edge.
// Clamping the left tap to [−1, maxX] is that replication: the pair at −1
// (only ever read when xa = 0) and the one at maxX are the edge column
// twice.
func hsampleGo(r, g, b []byte, sc []uint32, U, dU int64, xa, maxX int) {
	g = g[:len(r)]
	b = b[:len(r)]
	for i := range r {
		x0 := min(max(int(U>>16), -1), maxX)
		wx := int32(U>>8) & 255
		U += dU
		c := 3 * (x0 - xa + 1)
		p := sc[c : c+3 : c+3]
		ix := 256 - wx
		r[i] = uint8((int32(int16(p[0]))*ix + int32(int16(p[0]>>16))*wx + 1<<23 + 1<<15) >> 16)
		g[i] = uint8((int32(int16(p[1]))*ix + int32(int16(p[1]>>16))*wx + 1<<23 + 1<<15) >> 16)
		b[i] = uint8((int32(int16(p[2]))*ix + int32(int16(p[2]>>16))*wx + 1<<23 + 1<<15) >> 16)
	}
}

// forcePerPixel makes Render take the general per-pixel path for affine
// plans too; tests use that path as the reference for the span path.
var forcePerPixel bool

type span struct{ lo, hi, tile int }

func sortSpans(sp []span) {
	for i := 1; i < len(sp); i++ {
		for j := i; j > 0 && sp[j].lo < sp[j-1].lo; j-- {
			sp[j], sp[j-1] = sp[j-1], sp[j]
		}
	}
}

// interval returns the output columns [lo, hi) of a row whose source point
// (cx0 + ox·dx, cy0 + ox·dy) lies in [x0,x1)×[y0,y1). The bounds are solved
// in closed form, then settled against that same membership test so that
// rounding can never misplace a column.
func interval(cx0, dx, cy0, dy float64, x0, x1, y0, y1 float32, s int) (int, int) {
	in := func(ox int) bool {
		cx, cy := float32(cx0+float64(float64(ox)*dx)), float32(cy0+float64(float64(ox)*dy))
		return cx >= x0 && cx < x1 && cy >= y0 && cy < y1
	}
	lo, hi := 0.0, float64(s)
	clip := func(c0, d float64, a, b float32) {
		if d == 0 {
			if !(float32(c0) >= a && float32(c0) < b) {
				lo, hi = 1, 0
			}
			return
		}
		t0, t1 := (float64(a)-c0)/d, (float64(b)-c0)/d
		if d < 0 {
			t0, t1 = t1, t0
		}
		lo, hi = math.Max(lo, t0), math.Min(hi, t1)
	}
	clip(cx0, dx, x0, x1)
	clip(cy0, dy, y0, y1)
	if !(lo < hi) {
		return 0, 0
	}
	l := max(0, min(s, int(math.Ceil(lo))))
	h := max(l, min(s, int(math.Ceil(hi))))
	for l > 0 && in(l-1) {
		l--
	}
	for l < h && !in(l) {
		l++
	}
	for h < s && in(h) {
		h++
	}
	for h > l && !in(h-1) {
		h--
	}
	return l, h
}

func fillRow(r, g, b []byte, fr, fg, fb uint8) {
	fill(r, fr)
	fill(g, fg)
	fill(b, fb)
}

// fill sets every byte of p to v: a byte loop up to 16, then doubling
// copies (memmove), several times faster than a byte loop over the
// mosaic's wide borders.
func fill(p []byte, v uint8) {
	n := min(len(p), 16)
	for i := range p[:n] {
		p[i] = v
	}
	for n < len(p) {
		n += copy(p[n:], p[:n])
	}
}

// sampleSpan samples len(r) pixels bilinearly (8-bit weights) starting at
// source position (U, V) in 16.16 fixed point, stepping (dU, dV).
func sampleSpan(r, g, b, pix []byte, stride, maxX, maxY int, U, V, dU, dV int64) {
	g = g[:len(r)]
	b = b[:len(r)]
	for i := range r {
		x0 := int(U >> 16)
		y0 := int(V >> 16)
		wx := uint32(U>>8) & 255
		wy := uint32(V>>8) & 255
		U += dU
		V += dV
		x1, y1 := x0+1, y0+1
		if uint(x0) >= uint(maxX) || uint(y0) >= uint(maxY) { // at an image edge: replicate
			x0 = min(max(x0, 0), maxX)
			y0 = min(max(y0, 0), maxY)
			x1 = min(max(x1, 0), maxX)
			y1 = min(max(y1, 0), maxY)
		}
		a := y0*stride + 3*x0
		bb := y0*stride + 3*x1
		c := y1*stride + 3*x0
		d := y1*stride + 3*x1
		p00, p01, p10, p11 := pix[a:a+3:a+3], pix[bb:bb+3:bb+3], pix[c:c+3:c+3], pix[d:d+3:d+3]
		ix, iy := 256-wx, 256-wy
		rr := uint8(((uint32(p00[0])*ix+uint32(p01[0])*wx)*iy + (uint32(p10[0])*ix+uint32(p11[0])*wx)*wy + 1<<15) >> 16)
		gg := uint8(((uint32(p00[1])*ix+uint32(p01[1])*wx)*iy + (uint32(p10[1])*ix+uint32(p11[1])*wx)*wy + 1<<15) >> 16)
		bl := uint8(((uint32(p00[2])*ix+uint32(p01[2])*wx)*iy + (uint32(p10[2])*ix+uint32(p11[2])*wx)*wy + 1<<15) >> 16)
		r[i], g[i], b[i] = rr, gg, bl
	}
}
