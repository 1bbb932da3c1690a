package jpeg

import "github.com/segpipe/segpipe/pipeline/internal/ycc"

// scan decodes the entropy-coded data starting at pos into RGB pixels and
// returns them with the index of the marker code byte after the scan.
// Planes hold one MCU row at a time; each row is converted to RGB as soon
// as it is complete.
func (d *Decoder) scan(pos int, dst []byte) ([]byte, int, error) {
	hmax, vmax := d.comp[0].h, d.comp[0].v
	if d.ncomp == 1 {
		hmax, vmax = 1, 1
	}
	mxx := (d.w + 8*hmax - 1) / (8 * hmax)
	myy := (d.h + 8*vmax - 1) / (8 * vmax)
	yw, cw := 8*hmax*mxx, 8*mxx
	ySize := yw * 8 * vmax
	need := ySize
	if d.ncomp == 3 {
		need += 2 * cw * 8
	}
	if cap(d.planes) < need {
		d.planes = make([]byte, need)
	}
	planes := d.planes[:need]
	var plane [3][]byte
	var stride [3]int
	plane[0], stride[0] = planes[:ySize], yw
	if d.ncomp == 3 {
		plane[1], stride[1] = planes[ySize:ySize+8*cw], cw
		plane[2], stride[2] = planes[ySize+8*cw:], cw
	}
	n := 3 * d.w * d.h
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	pix := dst[:n]

	br := bitReader{data: d.data, pos: pos}
	for i := range d.comp[:d.ncomp] {
		d.comp[i].pred = 0
	}
	mcu, rst := 0, 0
	blk := &d.blk
	for my := 0; my < myy; my++ {
		for mx := 0; mx < mxx; mx++ {
			if d.ri > 0 && mcu > 0 && mcu%d.ri == 0 {
				if br.n < 8*uint(br.zeros) {
					return nil, 0, unsupported("scan data ends early")
				}
				p := br.pos
				for p < len(d.data) && d.data[p] == 0xff {
					p++
				}
				if p == br.pos || p >= len(d.data) || d.data[p] != byte(0xd0+rst) {
					return nil, 0, unsupported("missing restart marker")
				}
				br = bitReader{data: d.data, pos: p + 1}
				rst = (rst + 1) & 7
				for i := range d.comp[:d.ncomp] {
					d.comp[i].pred = 0
				}
			}
			mcu++
			for ci := 0; ci < d.ncomp; ci++ {
				c := &d.comp[ci]
				h, v := c.h, c.v
				if d.ncomp == 1 {
					h, v = 1, 1
				}
				q := &d.quant[c.tq]
				dc, ac := &d.huff[0][c.td], &d.huff[1][c.ta]
				for by := 0; by < v; by++ {
					for bx := 0; bx < h; bx++ {
						if br.n < 32 {
							br.fill()
						}
						s, ok := br.decode(dc)
						if !ok || s > 11 {
							return nil, 0, unsupported("bad DC code")
						}
						if s != 0 {
							if br.n < 16 {
								br.fill()
							}
							c.pred += br.receive(s)
						}
						blk[0] = c.pred * q[0]
						dcOnly := true
						for k := 1; k < 64; {
							if br.n < 32 {
								br.fill()
							}
							if f := ac.ac[br.acc>>(64-lutBits)]; f != 0 {
								br.acc <<= uint(f & 255)
								br.n -= uint(f & 255)
								k += int(f >> 8 & 255)
								if k > 63 {
									break // image/jpeg ends the block here too
								}
								blk[unzig[k]] = f >> 16 * q[k]
								dcOnly = false
								k++
								continue
							}
							rs, ok := br.decode(ac)
							if !ok {
								return nil, 0, unsupported("bad AC code")
							}
							r, s := int(rs>>4), rs&15
							if s == 0 {
								if r == 0 {
									break // end of block
								}
								if r != 15 {
									// An end-of-band run: progressive only,
									// though image/jpeg honours it here too.
									return nil, 0, unsupported("EOB run in a sequential scan")
								}
								k += 16
								continue
							}
							k += r
							if k > 63 || s > 10 {
								if k > 63 {
									break // image/jpeg ends the block here too
								}
								return nil, 0, unsupported("bad AC size")
							}
							blk[unzig[k]] = br.receive(s) * q[k]
							dcOnly = false
							k++
						}
						off := 8*by*stride[ci] + 8*(mx*h+bx)
						if dcOnly {
							fillBlock(plane[ci][off:], stride[ci], blk[0])
						} else {
							idctStore(plane[ci][off:], stride[ci], blk)
						}
						*blk = [64]int32{}
					}
				}
			}
		}
		d.toRGB(pix, my*8*vmax, min(8*vmax, d.h-my*8*vmax), vmax, plane, stride)
	}
	if br.n < 8*uint(br.zeros) {
		return nil, 0, unsupported("scan data ends early")
	}
	// The next marker: skip what the scan did not need (image/jpeg does
	// too), then fill bytes.
	p := br.pos
	for p+1 < len(d.data) && !(d.data[p] == 0xff && d.data[p+1] != 0 && d.data[p+1] != 0xff) {
		p++
	}
	return pix, p + 1, nil
}

// fillBlock stores the block whose only non-zero coefficient is the DC
// value dc: the inverse DCT of such a block is one value, which this
// computes with the same shifts as idctGo (rows: dc<<17; columns:
// (x+2¹⁹)>>2>>18).
func fillBlock(dst []byte, stride int, dc int32) {
	c := ((dc<<17 + 1<<19) >> 2 >> 18) + 128
	if uint32(c) > 255 {
		c = ^c >> 31 & 255
	}
	v := uint8(c)
	for y := 0; y < 8; y++ {
		row := dst[y*stride : y*stride+8 : y*stride+8]
		for x := range row {
			row[x] = v
		}
	}
}

// toRGB converts rows [y0, y0+rows) of the image from the MCU row's planes
// (chroma replicated, as image/jpeg's YCbCr image and the JFIF conversion
// give).
func (d *Decoder) toRGB(pix []byte, y0, rows, vmax int, plane [3][]byte, stride [3]int) {
	w := d.w
	for r := 0; r < rows; r++ {
		out := pix[3*w*(y0+r) : 3*w*(y0+r+1)]
		Y := plane[0][r*stride[0] : r*stride[0]+w]
		if d.ncomp == 1 {
			for x, v := range Y {
				o := out[3*x : 3*x+3 : 3*x+3]
				o[0], o[1], o[2] = v, v, v
			}
			continue
		}
		cr := r / vmax * stride[1]
		if d.comp[0].h == 2 {
			n := (w + 1) / 2
			ycc.RowHalf(out, Y, plane[1][cr:cr+n], plane[2][cr:cr+n])
		} else {
			ycc.RowFull(out, Y, plane[1][cr:cr+w], plane[2][cr:cr+w])
		}
	}
}
