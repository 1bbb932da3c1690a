package jpeg

import (
	"errors"
	"fmt"
)

// ErrUnsupported marks a stream this decoder does not handle (or found
// damaged); image/jpeg decides about those.
var ErrUnsupported = errors.New("jpeg: not a stream this decoder handles")

func unsupported(what string) error { return fmt.Errorf("%w: %s", ErrUnsupported, what) }

// MaxPixels bounds width·height of a decoded image (256 Mpixel, 768 MiB of
// RGB).
const MaxPixels = 1 << 28

// unzig maps zig-zag order to natural order.
var unzig = [64]uint8{
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
}

type component struct {
	id, h, v, tq int
	td, ta       int // Huffman tables of the scan
	pred         int32
}

// Decoder holds tables and plane buffers between decodes; its zero value
// is ready. A Decoder is not safe for concurrent use.
type Decoder struct {
	data      []byte
	quant     [4][64]int32 // zig-zag order
	haveQuant [4]bool
	huff      [2][4]huffTable
	comp      [3]component
	ncomp     int
	w, h      int
	ri        int
	frame     bool

	planes []byte
	blk    [64]int32
}

// Decode decodes data into RGB bytes taken from dst when it has the
// capacity (else a new slice) and returns the width, height and pixels
// (3·w·h bytes). An error wrapping ErrUnsupported means the stream is not
// of the kind this decoder handles or is damaged.
func (d *Decoder) Decode(data, dst []byte) (w, h int, pix []byte, err error) {
	d.data = data
	defer func() { d.data = nil }() // a pooled Decoder must not pin the row
	d.frame = false
	d.ri = 0
	d.haveQuant = [4]bool{}
	for c := range d.huff {
		for i := range d.huff[c] {
			d.huff[c][i].ok = false
		}
	}
	if len(data) < 4 || data[0] != 0xff || data[1] != 0xd8 {
		return 0, 0, nil, unsupported("no SOI marker")
	}
	pos := 2
	for {
		// Markers may be preceded by fill bytes 0xff.
		if pos+4 > len(data) || data[pos] != 0xff {
			return 0, 0, nil, unsupported("bad marker")
		}
		for pos < len(data) && data[pos] == 0xff {
			pos++
		}
		if pos+3 > len(data) {
			return 0, 0, nil, unsupported("truncated marker")
		}
		m := data[pos]
		pos++
		if m == 0xd9 || (m >= 0xd0 && m <= 0xd7) || m == 0x01 || m == 0xd8 {
			return 0, 0, nil, unsupported("marker out of place")
		}
		n := int(data[pos])<<8 | int(data[pos+1])
		if n < 2 || pos+n > len(data) {
			return 0, 0, nil, unsupported("bad segment length")
		}
		seg := data[pos+2 : pos+n]
		pos += n
		switch {
		case m == 0xc0 || m == 0xc1:
			if err := d.sof(seg); err != nil {
				return 0, 0, nil, err
			}
		case m >= 0xc2 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc:
			return 0, 0, nil, unsupported("not baseline or extended sequential Huffman")
		case m == 0xc4:
			if err := d.dht(seg); err != nil {
				return 0, 0, nil, err
			}
		case m == 0xdb:
			if err := d.dqt(seg); err != nil {
				return 0, 0, nil, err
			}
		case m == 0xdd:
			if len(seg) != 2 {
				return 0, 0, nil, unsupported("bad DRI")
			}
			d.ri = int(seg[0])<<8 | int(seg[1])
		case m == 0xee:
			if len(seg) >= 5 && string(seg[:5]) == "Adobe" {
				return 0, 0, nil, unsupported("Adobe colour transform")
			}
		case m == 0xda:
			if !d.frame {
				return 0, 0, nil, unsupported("SOS before SOF")
			}
			if err := d.sos(seg); err != nil {
				return 0, 0, nil, err
			}
			pix, end, err := d.scan(pos, dst)
			if err != nil {
				return 0, 0, nil, err
			}
			// One scan holds the whole image: the next marker must be EOI.
			if end >= len(data) || data[end] != 0xd9 {
				return 0, 0, nil, unsupported("more than one scan, or no EOI")
			}
			return d.w, d.h, pix, nil
		case m >= 0xe0 || m == 0xfe || m == 0xdc:
			// application data and comments: skipped
		default:
			return 0, 0, nil, unsupported(fmt.Sprintf("marker 0x%02x", m))
		}
	}
}

func (d *Decoder) sof(seg []byte) error {
	if d.frame {
		return unsupported("second SOF")
	}
	if len(seg) < 6 || seg[0] != 8 {
		return unsupported("not 8-bit")
	}
	d.h = int(seg[1])<<8 | int(seg[2])
	d.w = int(seg[3])<<8 | int(seg[4])
	d.ncomp = int(seg[5])
	if d.w == 0 || d.h == 0 || d.w*d.h > MaxPixels {
		return unsupported("image size")
	}
	if (d.ncomp != 1 && d.ncomp != 3) || len(seg) != 6+3*d.ncomp {
		return unsupported("component count")
	}
	for i := 0; i < d.ncomp; i++ {
		c := &d.comp[i]
		c.id = int(seg[6+3*i])
		c.h, c.v = int(seg[7+3*i]>>4), int(seg[7+3*i]&15)
		c.tq = int(seg[8+3*i])
		if c.tq > 3 {
			return unsupported("quantisation table id")
		}
	}
	if d.ncomp == 1 {
		if d.comp[0].h != 1 || d.comp[0].v != 1 {
			return unsupported("grey sampling factors")
		}
	} else {
		y := &d.comp[0]
		if y.h < 1 || y.h > 2 || y.v < 1 || y.v > 2 ||
			d.comp[1].h != 1 || d.comp[1].v != 1 || d.comp[2].h != 1 || d.comp[2].v != 1 {
			return unsupported("sampling factors")
		}
		if d.comp[0].id == 'R' && d.comp[1].id == 'G' && d.comp[2].id == 'B' {
			return unsupported("RGB-coded")
		}
	}
	d.frame = true
	return nil
}

func (d *Decoder) dqt(seg []byte) error {
	for len(seg) > 0 {
		pq, tq := seg[0]>>4, int(seg[0]&15)
		if tq > 3 || pq > 1 {
			return unsupported("bad DQT")
		}
		seg = seg[1:]
		q := &d.quant[tq]
		if pq == 0 {
			if len(seg) < 64 {
				return unsupported("short DQT")
			}
			for i := range q {
				q[i] = int32(seg[i])
			}
			seg = seg[64:]
		} else {
			if len(seg) < 128 {
				return unsupported("short DQT")
			}
			for i := range q {
				q[i] = int32(seg[2*i])<<8 | int32(seg[2*i+1])
			}
			seg = seg[128:]
		}
		d.haveQuant[tq] = true
	}
	return nil
}

func (d *Decoder) dht(seg []byte) error {
	for len(seg) > 0 {
		if len(seg) < 17 {
			return unsupported("short DHT")
		}
		tc, th := int(seg[0]>>4), int(seg[0]&15)
		if tc > 1 || th > 3 {
			return unsupported("bad DHT")
		}
		var counts [16]int
		total := 0
		for i := range counts {
			counts[i] = int(seg[1+i])
			total += counts[i]
		}
		if total == 0 || total > 256 || len(seg) < 17+total {
			return unsupported("bad DHT")
		}
		if err := d.huff[tc][th].build(counts, seg[17:17+total]); err != nil {
			return err
		}
		seg = seg[17+total:]
	}
	return nil
}

func (d *Decoder) sos(seg []byte) error {
	if len(seg) < 1 || int(seg[0]) != d.ncomp || len(seg) != 4+2*d.ncomp {
		return unsupported("scan does not hold every component")
	}
	for i := 0; i < d.ncomp; i++ {
		c := &d.comp[i]
		if int(seg[1+2*i]) != c.id {
			return unsupported("scan component order")
		}
		c.td, c.ta = int(seg[2+2*i]>>4), int(seg[2+2*i]&15)
		if c.td > 3 || c.ta > 3 || !d.huff[0][c.td].ok || !d.huff[1][c.ta].ok || !d.haveQuant[c.tq] {
			return unsupported("missing table")
		}
	}
	p := seg[1+2*d.ncomp:]
	if p[0] != 0 || p[1] != 63 || p[2] != 0 {
		return unsupported("spectral selection")
	}
	return nil
}
