package augment

import "fmt"

// Render writes the sample's output image into dst as CHW RGB planes of
// p.Out×p.Out (len 3·s·s). Every output pixel is computed once: its centre
// is mapped back through M⁻¹ to the source canvas, assigned to the tile
// whose visible rectangle holds it (fill colour when none), mapped into
// that tile's original image and sampled bilinearly (edge pixels
// replicated), then jittered in HSV. Neither the resized images nor the
// 2s×2s mosaic canvas are ever built.
func Render(dst []byte, p *Plan, tiles []Tile, fill uint8) error {
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
	fr, fg, fb := fill, fill, fill
	if p.hsv.on {
		fr, fg, fb = p.hsv.apply(fill, fill, fill)
	}
	mi := p.Minv
	proj := mi[6] != 0 || mi[7] != 0 || mi[8] != 1
	xc, yc := float32(p.Xc), float32(p.Yc)
	mosaic := p.NTiles == 4
	R, G, B := dst[:ss], dst[ss:2*ss], dst[2*ss:]
	for oy := 0; oy < s; oy++ {
		qy := float64(oy) + 0.5
		X := mi[0]*0.5 + mi[1]*qy + mi[2]
		Y := mi[3]*0.5 + mi[4]*qy + mi[5]
		Z := mi[6]*0.5 + mi[7]*qy + mi[8]
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
			fx := (cx-t.ox)*t.isx - 0.5
			fy := (cy-t.oy)*t.isy - 0.5
			x0 := int(fx+1) - 1 // floor for fx ≥ -1
			y0 := int(fy+1) - 1
			wx := fx - float32(x0)
			wy := fy - float32(y0)
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
			w00 := (1 - wx) * (1 - wy)
			w01 := wx * (1 - wy)
			w10 := (1 - wx) * wy
			w11 := wx * wy
			r = uint8(float32(p00[0])*w00 + float32(p01[0])*w01 + float32(p10[0])*w10 + float32(p11[0])*w11 + 0.5)
			g = uint8(float32(p00[1])*w00 + float32(p01[1])*w01 + float32(p10[1])*w10 + float32(p11[1])*w11 + 0.5)
			b = uint8(float32(p00[2])*w00 + float32(p01[2])*w01 + float32(p10[2])*w10 + float32(p11[2])*w11 + 0.5)
			if p.hsv.on {
				r, g, b = p.hsv.apply(r, g, b)
			}
			R[row+ox], G[row+ox], B[row+ox] = r, g, b
		}
	}
	return nil
}
