// Package ycc converts JPEG's YCbCr (JFIF, as color.YCbCrToRGB does, to
// the bit) into interleaved 8-bit RGB rows. On amd64 with AVX2 the rows go
// through vector kernels that give the same bytes as the Go rows, which
// stay as their test oracle and as the path on other CPUs.
//
// It is a package of its own because the package that decodes uses cgo
// in the turbojpeg build, and a cgo package cannot hold Go assembly.
package ycc

// rowFullGo converts one row with full-resolution chroma (4:4:4,
// 4:4:0: what re-encoded datasets such as coco-tiny contain): the
// reference of the vector kernel behind RowFull and the fallback. The
// loop body is color.YCbCrToRGB by hand (a call per pixel would not
// inline).
func rowFullGo(row, Y, cb, cr []byte) {
	n := len(Y)
	row = row[:3*n]
	cb = cb[:n]
	cr = cr[:n]
	for x := range n {
		cb1 := int32(cb[x]) - 128
		cr1 := int32(cr[x]) - 128
		y := int32(Y[x]) * 0x10101
		o := row[3*x : 3*x+3 : 3*x+3]
		o[0], o[1], o[2] = clamp16(y+91881*cr1), clamp16(y-22554*cb1-46802*cr1), clamp16(y+116130*cb1)
	}
}

// rowHalfGo converts one row whose chroma is halved horizontally
// (4:2:0, 4:2:2): the chroma terms are computed once per pixel pair.
// Integer sums regroup exactly, so the result is bit-identical to color.YCbCrToRGB
// per pixel. The reference of the vector kernel behind RowHalf.
func rowHalfGo(row, Y, cb, cr []byte) {
	n := len(Y)
	row = row[:3*n]
	cb = cb[:(n+1)/2]
	cr = cr[:len(cb)]
	x := 0
	for j := range n / 2 {
		cb1 := int32(cb[j]) - 128
		cr1 := int32(cr[j]) - 128
		dr := 91881 * cr1
		dg := -22554*cb1 - 46802*cr1
		db := 116130 * cb1
		y0 := int32(Y[x]) * 0x10101
		y1 := int32(Y[x+1]) * 0x10101
		o := row[3*x : 3*x+6 : 3*x+6]
		o[0], o[1], o[2] = clamp16(y0+dr), clamp16(y0+dg), clamp16(y0+db)
		o[3], o[4], o[5] = clamp16(y1+dr), clamp16(y1+dg), clamp16(y1+db)
		x += 2
	}
	if x < n { // odd width: the last pixel has its own chroma sample
		rowFullGo(row[3*x:], Y[x:], cb[x/2:x/2+1], cr[x/2:x/2+1])
	}
}

// clamp16 is the 16.16 → 8-bit clamp of color.YCbCrToRGB.
func clamp16(v int32) uint8 {
	if uint32(v)&0xff000000 == 0 {
		return uint8(v >> 16)
	}
	return uint8(^(v >> 31))
}
