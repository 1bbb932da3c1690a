package jpeg

// Fixed-point constants of the inverse DCT, rounded to b bits from 60-bit
// values: the constants and arithmetic of the standard library's
// image/jpeg (Go 1.26), so that both decoders give the same pixels.
const (
	fixCos1         = 1130768441178740757
	fixSin1         = 224923827593068887
	fixCos3         = 958619196450722178
	fixSin3         = 640528868967736374
	fixSqrt2inv     = 815238614083298888
	fixSqrt2invCos6 = 311978311033955632
	fixSqrt2invSin6 = 753182269664427492
)

func fix(x uint64, bits int) int32 { return int32((x + 1<<(59-bits)) >> (60 - bits)) }

// rot returns (x0·kc + x1·ks, −x0·ks + x1·kc) with three multiplies.
func rot(x0, x1, kc, ks int32) (int32, int32) {
	sum := kc * (x0 + x1)
	return sum + (ks-kc)*x1, sum - (kc+ks)*x0
}

// idctGo transforms a dequantised block (natural order) in place into
// level-unshifted samples: the reference of the vector kernel.
func idctGo(b *[64]int32) {
	for i := 0; i < 8; i++ {
		r := b[8*i : 8*i+8 : 8*i+8]
		x0, x7, x2, x5, x1, x6, x3, x4 := r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]
		x0 <<= 17
		x1 <<= 17
		x0, x1 = x0+x1, x0-x1
		x2, x3 = rot(x2, x3, fix(fixSqrt2invCos6, 18), -fix(fixSqrt2invSin6, 18))
		x1, x2 = x1+x2, x1-x2
		x0, x3 = x0+x3, x0-x3
		x4 <<= 7
		x7 <<= 7
		x7, x4 = x7+x4, x7-x4
		x6 *= fix(fixSqrt2inv, 8)
		x5 *= fix(fixSqrt2inv, 8)
		x7, x5 = x7+x5, x7-x5
		x4, x6 = x4+x6, x4-x6
		x4, x7 = rot(x4>>2, x7>>2, fix(fixCos3, 12), -fix(fixSin3, 12))
		x5, x6 = rot(x5>>2, x6>>2, fix(fixCos1, 12), -fix(fixSin1, 12))
		r[0], r[7] = x0+x7, x0-x7
		r[1], r[6] = x1+x6, x1-x6
		r[2], r[5] = x2+x5, x2-x5
		r[3], r[4] = x3+x4, x3-x4
	}
	for i := 0; i < 8; i++ {
		x0, x7, x2, x5 := b[i], b[8+i], b[16+i], b[24+i]
		x1, x6, x3, x4 := b[32+i], b[40+i], b[48+i], b[56+i]
		x0 += 1 << 19
		x0, x1 = (x0+x1)>>2, (x0-x1)>>2
		x2, x3 = rot(x2>>13, x3>>13, fix(fixSqrt2invCos6, 12), -fix(fixSqrt2invSin6, 12))
		x1, x2 = x1+x2, x1-x2
		x0, x3 = x0+x3, x0-x3
		x7, x4 = x7+x4, x7-x4
		x5 = (x5 >> 13) * fix(fixSqrt2inv, 14)
		x6 = (x6 >> 13) * fix(fixSqrt2inv, 14)
		x7, x5 = x7+x5, x7-x5
		x4, x6 = x4+x6, x4-x6
		x4, x7 = rot(x4>>14, x7>>14, fix(fixCos3, 12), -fix(fixSin3, 12))
		x5, x6 = rot(x5>>14, x6>>14, fix(fixCos1, 12), -fix(fixSin1, 12))
		b[i], b[56+i] = (x0+x7)>>18, (x0-x7)>>18
		b[8+i], b[48+i] = (x1+x6)>>18, (x1-x6)>>18
		b[16+i], b[40+i] = (x2+x5)>>18, (x2-x5)>>18
		b[24+i], b[32+i] = (x3+x4)>>18, (x3-x4)>>18
	}
}

// storeBlock level-shifts b by 128, clamps to [0, 255] and writes the 8×8
// samples to dst (row stride).
func storeBlock(dst []byte, stride int, b *[64]int32) {
	for y := 0; y < 8; y++ {
		row := dst[y*stride : y*stride+8 : y*stride+8]
		src := b[8*y : 8*y+8 : 8*y+8]
		for x, c := range src {
			c += 128
			if uint32(c) > 255 {
				c = ^c >> 31 & 255
			}
			row[x] = uint8(c)
		}
	}
}
