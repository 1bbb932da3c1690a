package jpeg

// lutBits is the width of the Huffman lookup: codes up to 9 bits (nearly
// every symbol of real images) decode with one table read.
const lutBits = 9

type huffTable struct {
	ok bool
	// lut[next 9 bits] = length<<8 | symbol, 0 when the code is longer.
	lut [1 << lutBits]uint16
	// canonical decoding of longer codes: a code c of length l is valid
	// when c ≤ maxcode[l]; its symbol is vals[valptr[l]+c−mincode[l]].
	maxcode, mincode, valptr [17]int32
	vals                     [256]uint8
	// ac[next 9 bits], for AC tables: when a code and the magnitude bits
	// after it fit in 9 bits, the whole coefficient at once: value<<16 |
	// run<<8 | bits used (0 when it does not fit, or for EOB and ZRL).
	ac [1 << lutBits]int32
}

func (t *huffTable) build(counts [16]int, vals []byte) error {
	*t = huffTable{}
	copy(t.vals[:], vals)
	code, k := int32(0), int32(0)
	for l := 1; l <= 16; l++ {
		n := int32(counts[l-1])
		t.valptr[l], t.mincode[l] = k, code
		t.maxcode[l] = -1
		if n > 0 {
			t.maxcode[l] = code + n - 1
		}
		for i := int32(0); i < n; i++ {
			if code >= 1<<l {
				return unsupported("Huffman table overfull")
			}
			if l <= lutBits {
				lo := code << (lutBits - l)
				for j := int32(0); j < 1<<(lutBits-l); j++ {
					t.lut[lo+j] = uint16(l)<<8 | uint16(vals[k+i])
				}
			}
			code++
		}
		k += n
		code <<= 1
	}
	for i, e := range t.lut {
		l, rs := uint(e>>8), uint8(e)
		r, sz := int32(rs>>4), uint(rs&15)
		if e == 0 || sz == 0 || l+sz > lutBits {
			continue
		}
		v := int32(i>>(lutBits-l-sz)) & (1<<sz - 1)
		if v < 1<<(sz-1) {
			v -= 1<<sz - 1
		}
		t.ac[i] = v<<16 | r<<8 | int32(l+sz)
	}
	t.ok = true
	return nil
}

// bitReader reads entropy-coded bits MSB first through a 64-bit buffer,
// unstuffing 0xff00. At a marker it stops and feeds zero bytes, counting
// them, so that a scan that needed bits beyond its end can be told from one
// that merely read ahead.
type bitReader struct {
	data  []byte
	pos   int
	acc   uint64 // next bit at bit 63
	n     uint   // valid bits in acc
	zeros int    // zero bytes fed past a marker or the end
}

func (b *bitReader) fill() {
	// Fast path: eight plain bytes (no 0xff) at once.
	if b.pos+8 <= len(b.data) {
		p := b.data[b.pos : b.pos+8 : b.pos+8]
		x := uint64(p[0])<<56 | uint64(p[1])<<48 | uint64(p[2])<<40 | uint64(p[3])<<32 |
			uint64(p[4])<<24 | uint64(p[5])<<16 | uint64(p[6])<<8 | uint64(p[7])
		if y := ^x; (y-0x0101010101010101)&^y&0x8080808080808080 == 0 {
			k := (64 - b.n) >> 3 // whole bytes that fit
			b.acc |= x >> b.n
			b.n += 8 * k
			b.pos += int(k)
			if b.n < 64 {
				b.acc &^= ^uint64(0) >> b.n // keep only the bytes counted
			}
			return
		}
	}
	for b.n <= 56 {
		var c byte
		if b.pos < len(b.data) {
			c = b.data[b.pos]
			if c != 0xff {
				b.pos++
			} else if b.pos+1 < len(b.data) && b.data[b.pos+1] == 0 {
				b.pos += 2
			} else {
				c = 0 // a marker: stay on it
				b.zeros++
			}
		} else {
			b.zeros++
		}
		b.acc |= uint64(c) << (56 - b.n)
		b.n += 8
	}
}

// decode reads one Huffman symbol; the caller has ensured n ≥ 16. Codes
// longer than the lookup take decodeLong.
func (b *bitReader) decode(t *huffTable) (uint8, bool) {
	if e := t.lut[b.acc>>(64-lutBits)]; e != 0 {
		l := uint(e >> 8)
		b.acc <<= l
		b.n -= l
		return uint8(e), true
	}
	return b.decodeLong(t)
}

func (b *bitReader) decodeLong(t *huffTable) (uint8, bool) {
	code := int32(b.acc >> 48)
	for l := lutBits + 1; l <= 16; l++ {
		c := code >> (16 - l)
		if c <= t.maxcode[l] {
			b.acc <<= uint(l)
			b.n -= uint(l)
			return t.vals[(t.valptr[l]+c-t.mincode[l])&255], true
		}
	}
	return 0, false
}

// receive reads s bits (1 ≤ s ≤ 16; the caller has ensured n ≥ s) as the
// signed value of JPEG's EXTEND.
func (b *bitReader) receive(s uint8) int32 {
	v := int32(b.acc >> (64 - uint(s)))
	b.acc <<= uint(s)
	b.n -= uint(s)
	if v < 1<<(s-1) {
		v -= 1<<s - 1
	}
	return v
}
