package predecode

// Resizer shrinks packed RGB images by exact area averaging
// (shard.ResampleArea): stored pixel (i, r) is the mean of the source area
// [i·W/W', (i+1)·W/W') × [r·H/H', (r+1)·H/H'), each source pixel weighted
// by the fraction of it that area covers, rounded half up. All weights are
// integers (a source pixel is W' units wide, a stored one W), so the result
// is exact and the same on every platform. The filter is separable: a
// horizontal pass per source row, then a vertical one. Its scratch is
// reused; a Resizer is not safe for concurrent use.
type Resizer struct {
	xs, ys []span
	xw, yw []uint32
	hrow   []uint32 // horizontal sums of one source row
	acc    []uint64 // weighted sums of one stored row
}

// span is the source pixels [lo, lo+n) one stored pixel covers; their
// weights are at [off, off+n) of the axis' weights.
type span struct{ lo, off, n int }

// spans returns, for every stored pixel of an axis of n source pixels
// shrunk to m, the source pixels it covers and their overlaps, in units
// where a source pixel is m wide and a stored pixel n wide.
func spans(ss []span, ws []uint32, n, m int) ([]span, []uint32) {
	ss, ws = ss[:0], ws[:0]
	for i := 0; i < m; i++ {
		a, b := i*n, (i+1)*n // the stored pixel in fine units
		lo := a / m
		sp := span{lo: lo, off: len(ws)}
		for j := lo; j*m < b; j++ {
			ws = append(ws, uint32(min(b, (j+1)*m)-max(a, j*m)))
		}
		sp.n = len(ws) - sp.off
		ss = append(ss, sp)
	}
	return ss, ws
}

// Resize writes src (w×h×3) shrunk to nw×nh (1 <= nw <= w, 1 <= nh <= h)
// into dst (grown when short) and returns it.
func (z *Resizer) Resize(dst, src []byte, w, h, nw, nh int) []byte {
	n := 3 * nw * nh
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	z.xs, z.xw = spans(z.xs, z.xw, w, nw)
	z.ys, z.yw = spans(z.ys, z.yw, h, nh)
	if cap(z.acc) < 3*nw {
		z.acc = make([]uint64, 3*nw)
		z.hrow = make([]uint32, 3*nw)
	}
	acc, hrow := z.acc[:3*nw], z.hrow[:3*nw]
	div := uint64(w) * uint64(h)
	for r, ys := range z.ys {
		clear(acc)
		// A source row shared by two stored rows is summed twice, which
		// costs less than the bookkeeping to keep it.
		for k := 0; k < ys.n; k++ {
			wy := uint64(z.yw[ys.off+k])
			z.horizontal(hrow, src[3*w*(ys.lo+k):3*w*(ys.lo+k+1)])
			for i, v := range hrow {
				acc[i] += wy * uint64(v)
			}
		}
		out := dst[3*nw*r : 3*nw*(r+1)]
		for i, v := range acc {
			out[i] = uint8((v + div/2) / div)
		}
	}
	return dst
}

// horizontal sums one source row into the stored columns, unnormalised
// (each entry is W times the column's mean).
func (z *Resizer) horizontal(dst []uint32, row []byte) {
	for i, xs := range z.xs {
		var r, g, b uint32
		for k := 0; k < xs.n; k++ {
			wx := z.xw[xs.off+k]
			p := 3 * (xs.lo + k)
			r += wx * uint32(row[p])
			g += wx * uint32(row[p+1])
			b += wx * uint32(row[p+2])
		}
		dst[3*i], dst[3*i+1], dst[3*i+2] = r, g, b
	}
}
