package augment

import (
	"math"
	"sync"
)

// hsv applies YOLO's HSV jitter: per image, gains g = 1 + U(-1,1)·(h,s,v)
// give lookup tables hue' = (hue·gh) mod 180, sat' = clip(sat·gs),
// val' = clip(val·gv) on OpenCV's 8-bit HSV (hue in [0,180)). The RGB↔HSV
// conversions follow OpenCV's 8-bit algorithms (integer forward with 12-bit
// fixed-point tables, float backward).
type hsv struct {
	on      bool
	h, s, v [256]uint8
}

const hsvShift = 12

var sdiv, hdiv [256]int32

func init() {
	for i := 1; i < 256; i++ {
		sdiv[i] = int32(math.Round(float64(255<<hsvShift) / float64(i)))
		hdiv[i] = int32(math.Round(float64(180<<hsvShift) / (6 * float64(i))))
	}
}

func (t *hsv) set(gh, gs, gv float64) {
	t.on = true
	for x := 0; x < 256; x++ {
		t.h[x] = uint8(math.Mod(float64(x)*gh, 180))
		t.s[x] = uint8(min(max(float64(x)*gs, 0), 255))
		t.v[x] = uint8(min(max(float64(x)*gv, 0), 255))
	}
}

var hsvSectors = [6][3]uint8{{1, 3, 0}, {1, 0, 2}, {3, 0, 1}, {0, 2, 1}, {0, 1, 3}, {2, 1, 0}} // b, g, r

// apply maps one RGB pixel.
func (t *hsv) apply(r, g, b uint8) (uint8, uint8, uint8) {
	ri, gi, bi := int32(r), int32(g), int32(b)
	v := max(ri, gi, bi)
	vmin := min(ri, gi, bi)
	if v == vmin { // grey: saturation 0 stays 0, hue irrelevant
		x := t.v[v]
		return x, x, x
	}
	diff := v - vmin
	s := (diff*sdiv[v] + 1<<(hsvShift-1)) >> hsvShift
	var h int32
	switch {
	case v == ri:
		h = gi - bi
	case v == gi:
		h = bi - ri + 2*diff
	default:
		h = ri - gi + 4*diff
	}
	h = (h*hdiv[diff] + 1<<(hsvShift-1)) >> hsvShift
	if h < 0 {
		h += 180
	}
	hh, ss, vv := t.h[h], t.s[s], t.v[v]
	vf := float32(vv)
	if ss == 0 {
		return vv, vv, vv
	}
	sf := float32(float32(ss) * (1.0 / 255))
	hf := float32(float32(hh) * (6.0 / 180))
	sector := int(hf)
	hf -= float32(sector)
	if sector >= 6 {
		sector, hf = 0, 0
	}
	tab := [4]float32{vf, vf * (1 - sf), vf * (1 - float32(sf*hf)), vf * (1 - float32(sf*(1-hf)))}
	sd := &hsvSectors[sector]
	return round8(tab[sd[2]]), round8(tab[sd[1]]), round8(tab[sd[0]])
}

func round8(x float32) uint8 {
	if x >= 255 {
		return 255
	}
	if x <= 0 {
		return 0
	}
	return uint8(x + 0.5)
}

// hsvTable is hsv with the backward conversion precomputed per image. In
// OpenCV's HSV→RGB one channel gets v', one v'·(1−s') and one v'·(1−s'·f)
// or v'·(1−s'·(1−f)); which channel gets which depends on the hue alone.
// So per image, for every input hue and saturation (the LUTs folded in),
// coef holds the three channel coefficients in 0.12 fixed point, packed
// 21 bits apart in one uint64: one multiply by v' scales all three
// channels at once (255·4096 < 2²¹, so the fields never carry into each
// other), and the per-pixel work after the forward conversion is one
// load, one multiply and three shifts. 362 KB, indexed by a spatially
// coherent (hue, saturation), so the lookups mostly hit L1/L2. Building
// it costs 181·256 evaluations per image.
type hsvTable struct {
	v    [256]uint8
	coef [181 * 256]uint64
}

const (
	coefShift = 12
	coefField = 21
	coefMask  = 1<<coefField - 1
	// coefRound adds one half to each field before the shift.
	coefRound = 1<<(coefShift-1) | 1<<(coefShift-1+coefField) | 1<<(coefShift-1+2*coefField)
)

var hsvTables = sync.Pool{New: func() any { return new(hsvTable) }}

// build fills t for the gains of h. Per image that is 181·256
// coefficient words, so the rows are built by a vector kernel where there
// is one (coefRow dispatches; coefRowGo is its oracle): in Go they cost
// about as much as jittering a fifth of the image.
func (t *hsvTable) build(h *hsv) {
	t.v = h.v
	var k coefInputs
	for si := 0; si < 256; si++ {
		sf := float32(float32(h.s[si]) * (1.0 / 255))
		k.sf[si] = sf
		k.minc[si] = uint32(float32(float32(1-sf)*(1<<coefShift)) + 0.5)
	}
	for hi := 0; hi <= 180; hi++ {
		hf := float32(float32(h.h[hi]) * (6.0 / 180))
		sector := int(hf)
		hf -= float32(sector)
		if sector >= 6 {
			sector, hf = 0, 0
		}
		// Each of the four coefficients (one, 1−s', 1−s'f, 1−s'(1−f)) goes
		// to the field of the channel this sector gives it; a shift of 64
		// drops the one it gives none.
		sd := &hsvSectors[sector]
		sh := [4]uint64{64, 64, 64, 64}
		sh[sd[2]], sh[sd[1]], sh[sd[0]] = 0, coefField, 2*coefField // r, g, b
		coefRow(t.coef[hi*256:hi*256+256], &k, hf, 1-hf, &sh)
	}
}

// coefInputs holds the per-saturation inputs of a coefficient row: s' as
// a fraction and the coefficient 1−s' in 0.12 fixed point.
type coefInputs struct {
	sf   [256]float32
	minc [256]uint32
}

// coefRowGo fills one hue's row of coefficients: for every saturation,
// the coefficients one, 1−s', 1−s'·hf and 1−s'·hf1 (hf1 = 1−hf) in 0.12
// fixed point, rounded, each shifted left by its sh entry and or-ed
// together. The explicit float32 conversions keep every product rounded
// on its own (no fused multiply-add), as the vector kernel computes it.
func coefRowGo(row []uint64, k *coefInputs, hf, hf1 float32, sh *[4]uint64) {
	row = row[:256]
	c0 := uint64(1<<coefShift) << sh[0]
	for si := range row {
		sf := k.sf[si]
		c2 := uint64(float32(float32(1-float32(sf*hf))*(1<<coefShift)) + 0.5)
		c3 := uint64(float32(float32(1-float32(sf*hf1))*(1<<coefShift)) + 0.5)
		row[si] = c0 | uint64(k.minc[si])<<sh[1] | c2<<sh[2] | c3<<sh[3]
	}
}

// apply maps one RGB pixel (the reference for applyRow, and the tests').
func (t *hsvTable) apply(r, g, b uint8) (uint8, uint8, uint8) {
	R, G, B := [1]uint8{r}, [1]uint8{g}, [1]uint8{b}
	t.applyRow(R[:], G[:], B[:])
	return R[0], G[0], B[0]
}

// applyRowGo maps a row of planar RGB pixels in place: the reference for
// the vector kernels (applyRow dispatches) and the fallback on other CPUs.
// A loop over a row rather than a call per pixel: the conversion is too
// large to inline, and a call per pixel cost as much as the conversion
// itself.
func (t *hsvTable) applyRowGo(r, g, b []uint8) {
	g = g[:len(r)]
	b = b[:len(r)]
	for i := range r {
		ri, gi, bi := int32(r[i]), int32(g[i]), int32(b[i])
		v := max(ri, gi, bi)
		diff := v - min(ri, gi, bi)
		// A grey pixel (diff 0) gets s = 0 and h = 0, whose coefficients
		// are all one: no branch needed.
		s := (diff*sdiv[uint8(v)] + 1<<(hsvShift-1)) >> hsvShift
		// OpenCV's branch-free hue selection: masks instead of a switch
		// that natural images mispredict.
		vr := -b2i(v == ri)
		vg := -b2i(v == gi)
		h := (vr & (gi - bi)) + (^vr & ((vg & (bi - ri + 2*diff)) + (^vg & (ri - gi + 4*diff))))
		h = (h*hdiv[uint8(diff)] + 1<<(hsvShift-1)) >> hsvShift
		h += 180 & (h >> 31)
		p := uint64(t.v[uint8(v)])*t.coef[uint32(h)<<8|uint32(s)&255] + coefRound
		r[i], g[i], b[i] = uint8(p>>coefShift), uint8(p>>(coefShift+coefField)), uint8(p>>(coefShift+2*coefField))
	}
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
