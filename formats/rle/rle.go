package rle

import (
	"errors"
	"fmt"
	"math"
)

// RLE is a run-length encoded binary mask of H rows and W columns in COCO's
// column-major order.
type RLE struct {
	H, W   int
	Counts []uint32
}

// ErrMalformed is wrapped by every error that reports an invalid RLE.
var ErrMalformed = errors.New("malformed RLE")

// Encode returns the compressed COCO string for counts (rleToString).
func Encode(counts []uint32) string {
	return string(AppendEncode(nil, counts))
}

// AppendEncode appends the compressed COCO string for counts to dst, so
// callers encoding many masks can reuse one buffer.
func AppendEncode(dst []byte, counts []uint32) []byte {
	for i, c := range counts {
		x := int64(c)
		if i > 2 {
			x -= int64(counts[i-2])
		}
		for more := true; more; {
			ch := byte(x & 0x1f)
			x >>= 5
			if ch&0x10 != 0 {
				more = x != -1
			} else {
				more = x != 0
			}
			if more {
				ch |= 0x20
			}
			dst = append(dst, ch+48)
		}
	}
	return dst
}

// maxGroups bounds the 5-bit groups of one count: 7 groups hold 35 bits,
// enough for any uint32 count and its delta; more means corrupt input.
const maxGroups = 7

// Decode parses a compressed COCO counts string (rleFrString). It rejects
// bytes outside '0'..'o', a string that ends inside a count, and counts
// that fall outside the uint32 range after the delta is undone.
func Decode(s string) ([]uint32, error) {
	return AppendDecode(nil, s)
}

// AppendDecode is Decode appending to dst.
func AppendDecode(dst []uint32, s string) ([]uint32, error) {
	base := len(dst)
	p := 0
	for p < len(s) {
		var x int64
		k := 0
		start := p
		for more := true; more; {
			if p >= len(s) {
				return dst, fmt.Errorf("%w: count %d at byte %d: string ends inside a count", ErrMalformed, len(dst)-base, start)
			}
			c := s[p]
			if c < 48 || c > 48+63 {
				return dst, fmt.Errorf("%w: byte %d is %q, want '0'..'o'", ErrMalformed, p, c)
			}
			if k == maxGroups {
				return dst, fmt.Errorf("%w: count %d at byte %d: more than %d groups", ErrMalformed, len(dst)-base, start, maxGroups)
			}
			c -= 48
			x |= int64(c&0x1f) << (5 * k)
			more = c&0x20 != 0
			p++
			k++
			if !more && c&0x10 != 0 {
				x |= -1 << (5 * k)
			}
		}
		m := len(dst) - base
		if m > 2 {
			x += int64(dst[len(dst)-2])
		}
		if x < 0 || x > math.MaxUint32 {
			return dst, fmt.Errorf("%w: count %d at byte %d decodes to %d", ErrMalformed, m, start, x)
		}
		dst = append(dst, uint32(x))
	}
	return dst, nil
}

// FromString decodes a compressed counts string for an h×w image and checks
// that the runs cover exactly h·w pixels.
func FromString(s string, h, w int) (RLE, error) {
	cnts, err := Decode(s)
	if err != nil {
		return RLE{}, err
	}
	r := RLE{H: h, W: w, Counts: cnts}
	return r, r.Validate()
}

// Validate reports whether the size is non-negative and the counts sum to
// H·W.
func (r RLE) Validate() error {
	if r.H < 0 || r.W < 0 {
		return fmt.Errorf("%w: negative size [%d, %d]", ErrMalformed, r.H, r.W)
	}
	var sum uint64
	for _, c := range r.Counts {
		sum += uint64(c)
	}
	if sum != uint64(r.H)*uint64(r.W) {
		return fmt.Errorf("%w: counts sum to %d, size [%d, %d] has %d pixels", ErrMalformed, sum, r.H, r.W, r.H*r.W)
	}
	return nil
}

// String returns the compressed counts string.
func (r RLE) String() string { return Encode(r.Counts) }

// Area returns the number of foreground pixels: the sum of the odd-indexed
// counts.
func (r RLE) Area() int { return Area(r.Counts) }

// Area returns the sum of the odd-indexed counts.
func Area(counts []uint32) int {
	a := 0
	for i := 1; i < len(counts); i += 2 {
		a += int(counts[i])
	}
	return a
}

// Bbox returns [x, y, w, h] of the foreground as rleToBbox computes it,
// including its quirks: an odd trailing count is ignored, and a run that
// wraps into a later column widens the box to the full height.
func (r RLE) Bbox() [4]float64 {
	h, w := uint32(r.H), uint32(r.W)
	m := len(r.Counts) / 2 * 2
	if m == 0 || h == 0 {
		return [4]float64{}
	}
	xs, ys, xe, ye := w, h, uint32(0), uint32(0)
	var cc, xp uint32
	for j := 0; j < m; j++ {
		cc += r.Counts[j]
		t := cc - uint32(j%2)
		y := t % h
		x := (t - y) / h
		if j%2 == 0 {
			xp = x
		} else if xp < x {
			ys, ye = 0, h-1
		}
		xs, xe = min(xs, x), max(xe, x)
		ys, ye = min(ys, y), max(ye, y)
	}
	return [4]float64{float64(xs), float64(ys), float64(xe - xs + 1), float64(ye - ys + 1)}
}

// Merge returns the union of rs (rleMerge with intersect=0). All must share
// one size. A single RLE is returned with its counts unchanged (copied).
func Merge(rs []RLE) (RLE, error) {
	return merge(rs, false)
}

// Intersect returns the intersection of rs (rleMerge with intersect=1).
func Intersect(rs []RLE) (RLE, error) {
	return merge(rs, true)
}

func merge(rs []RLE, intersect bool) (RLE, error) {
	if len(rs) == 0 {
		return RLE{}, nil
	}
	h, w := rs[0].H, rs[0].W
	cnts := append([]uint32(nil), rs[0].Counts...)
	if len(rs) == 1 {
		return RLE{H: h, W: w, Counts: cnts}, nil
	}
	var out []uint32
	for i := 1; i < len(rs); i++ {
		b := rs[i]
		if b.H != h || b.W != w {
			return RLE{}, fmt.Errorf("merge: part %d is %dx%d, part 0 is %dx%d", i, b.H, b.W, h, w)
		}
		var ok bool
		out, ok = mergeTwo(out[:0], cnts, b.Counts, intersect)
		if !ok {
			return RLE{}, fmt.Errorf("%w: merge: part %d covers a different number of pixels than parts 0..%d", ErrMalformed, i, i-1)
		}
		cnts, out = out, cnts
	}
	return RLE{H: h, W: w, Counts: cnts}, nil
}

// mergeTwo is the inner loop of rleMerge. It reports false when A and B
// cover different pixel counts, where the C loop would never end.
func mergeTwo(dst, A, B []uint32, intersect bool) ([]uint32, bool) {
	var ca, cb uint32
	if len(A) > 0 {
		ca = A[0]
	}
	if len(B) > 0 {
		cb = B[0]
	}
	var v, va, vb bool
	a, b := 1, 1
	var cc uint32
	for ct := uint32(1); ct > 0; {
		c := min(ca, cb)
		cc += c
		ct = 0
		ca -= c
		if ca == 0 && a < len(A) {
			ca = A[a]
			a++
			va = !va
		}
		ct += ca
		cb -= c
		if cb == 0 && b < len(B) {
			cb = B[b]
			b++
			vb = !vb
		}
		ct += cb
		if ct > 0 && (ca == 0 && a >= len(A) || cb == 0 && b >= len(B)) {
			return dst, false
		}
		vp := v
		if intersect {
			v = va && vb
		} else {
			v = va || vb
		}
		if v != vp || ct == 0 {
			dst = append(dst, cc)
			cc = 0
		}
	}
	return dst, true
}

// IoU returns the intersection over union of dt and gt as rleIou computes
// it: 0 when the bounding boxes or the masks do not overlap, -1 when the
// sizes differ (or, where rleIou would loop forever, when the counts of
// two overlapping masks cover different pixel counts), and for a crowd gt
// the intersection over dt's area.
func IoU(dt, gt RLE, crowd bool) float64 {
	db, gb := dt.Bbox(), gt.Bbox()
	if BoxIoU(db, gb, crowd) <= 0 {
		return 0
	}
	return runIoU(dt, gt, crowd)
}

// IoUMatrix fills out[d*len(gts)+g] with IoU(dts[d], gts[g], crowd[g]).
// crowd may be nil. out must have room for len(dts)·len(gts) values.
//
// Instead of rleIou's bounding-box pre-test it skips pairs whose
// foreground column spans are disjoint, which needs one addition per run
// rather than two divisions; both tests only skip pairs that share no
// pixel, whose IoU is 0 either way, so the values are identical.
func IoUMatrix(out []float64, dts, gts []RLE, crowd []bool) {
	var buf [64]span
	var gs []span
	if len(gts) <= len(buf) {
		gs = buf[:len(gts)]
	} else {
		gs = make([]span, len(gts))
	}
	for g := range gts {
		gs[g] = colSpan(gts[g])
	}
	G := len(gts)
	for d := range dts {
		ds := colSpan(dts[d])
		for g := range gts {
			cr := crowd != nil && crowd[g]
			o := 0.0
			switch {
			case dts[d].H != gts[g].H || dts[d].W != gts[g].W:
				o = IoU(dts[d], gts[g], cr) // rleIou's -1, only past its box test
			case ds.empty || gs[g].empty || ds.x1 < gs[g].x0 || gs[g].x1 < ds.x0:
			default:
				o = runIoU(dts[d], gts[g], cr)
			}
			out[d*G+g] = o
		}
	}
}

// span is the range of columns holding foreground.
type span struct {
	x0, x1 int
	empty  bool
}

func colSpan(r RLE) span {
	if r.H <= 0 {
		return span{empty: true}
	}
	pos, first, last := 0, -1, -1
	for j, c := range r.Counts {
		if j%2 == 1 && c > 0 {
			if first < 0 {
				first = pos
			}
			last = pos + int(c) - 1
		}
		pos += int(c)
	}
	if first < 0 {
		return span{empty: true}
	}
	return span{x0: first / r.H, x1: last / r.H}
}

// runIoU is the run-walking part of rleIou.
func runIoU(dt, gt RLE, crowd bool) float64 {
	if dt.H != gt.H || dt.W != gt.W {
		return -1
	}
	A, B := dt.Counts, gt.Counts
	var ca, cb uint32
	if len(A) > 0 {
		ca = A[0]
	}
	if len(B) > 0 {
		cb = B[0]
	}
	var va, vb bool
	a, b := 1, 1
	var i, u uint32
	for ct := uint32(1); ct > 0; {
		c := min(ca, cb)
		if va || vb {
			u += c
			if va && vb {
				i += c
			}
		}
		ct = 0
		ca -= c
		if ca == 0 && a < len(A) {
			ca = A[a]
			a++
			va = !va
		}
		ct += ca
		cb -= c
		if cb == 0 && b < len(B) {
			cb = B[b]
			b++
			vb = !vb
		}
		ct += cb
		if ct > 0 && (ca == 0 && a >= len(A) || cb == 0 && b >= len(B)) {
			return -1 // runs cover different pixel counts
		}
	}
	if i == 0 {
		u = 1
	} else if crowd {
		u = uint32(Area(A))
	}
	return float64(i) / float64(u)
}

// BoxIoU returns the IoU of two [x, y, w, h] boxes as bbIou computes it; for
// a crowd gt the union is the area of dt.
func BoxIoU(dt, gt [4]float64, crowd bool) float64 {
	// Explicit float64 conversions keep every product rounded on its own,
	// as the C code does, even where the compiler could fuse a multiply-add.
	ga := float64(gt[2] * gt[3])
	da := float64(dt[2] * dt[3])
	w := math.Min(float64(dt[2]+dt[0]), float64(gt[2]+gt[0])) - math.Max(dt[0], gt[0])
	if w <= 0 {
		return 0
	}
	h := math.Min(float64(dt[3]+dt[1]), float64(gt[3]+gt[1])) - math.Max(dt[1], gt[1])
	if h <= 0 {
		return 0
	}
	i := float64(w * h)
	u := da
	if !crowd {
		u = float64(da+ga) - i
	}
	return i / u
}
