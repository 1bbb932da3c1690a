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
	sf := float32(ss) * (1.0 / 255)
	hf := float32(hh) * (6.0 / 180)
	sector := int(hf)
	hf -= float32(sector)
	if sector >= 6 {
		sector, hf = 0, 0
	}
	tab := [4]float32{vf, vf * (1 - sf), vf * (1 - sf*hf), vf * (1 - sf*(1-hf))}
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
// So per image: role[h] (per channel: 0 max, 1 min, 2 mid), min[s] and
// mid[h][s] in 1.15 fixed point, indexed by the input hue and saturation
// (the LUTs are folded in). 92 KB, so the per-pixel lookups stay in cache.
// Building it costs 181·256 evaluations per image.
type hsvTable struct {
	v    [256]uint8
	role [181][3]uint8
	min  [256]uint32
	mid  [181 * 256]uint16
}

var hsvTables = sync.Pool{New: func() any { return new(hsvTable) }}

func (t *hsvTable) build(h *hsv) {
	t.v = h.v
	for si := 0; si < 256; si++ {
		t.min[si] = uint32((1-float32(h.s[si])*(1.0/255))*(1<<15) + 0.5)
	}
	for hi := 0; hi <= 180; hi++ {
		hf := float32(h.h[hi]) * (6.0 / 180)
		sector := int(hf)
		hf -= float32(sector)
		if sector >= 6 {
			sector, hf = 0, 0
		}
		sd := &hsvSectors[sector]
		midTab := uint8(0)
		for c, ti := range [3]uint8{sd[2], sd[1], sd[0]} { // r, g, b
			switch ti {
			case 0:
				t.role[hi][c] = 0
			case 1:
				t.role[hi][c] = 1
			default:
				t.role[hi][c] = 2
				midTab = ti
			}
		}
		for si := 0; si < 256; si++ {
			sf := float32(h.s[si]) * (1.0 / 255)
			m := 1 - sf*hf
			if midTab == 3 {
				m = 1 - sf*(1-hf)
			}
			t.mid[hi*256+si] = uint16(m*(1<<15) + 0.5)
		}
	}
}

func (t *hsvTable) apply(r, g, b uint8) (uint8, uint8, uint8) {
	ri, gi, bi := int32(r), int32(g), int32(b)
	v := max(ri, gi, bi)
	vmin := min(ri, gi, bi)
	vv := uint32(t.v[v])
	if v == vmin {
		return uint8(vv), uint8(vv), uint8(vv)
	}
	diff := vmin - v
	diff = -diff
	s := (diff*sdiv[v] + 1<<(hsvShift-1)) >> hsvShift
	// OpenCV's branch-free hue selection: masks instead of a switch that
	// natural images mispredict.
	vr := -b2i(v == ri)
	vg := -b2i(v == gi)
	h := (vr & (gi - bi)) + (^vr & ((vg & (bi - ri + 2*diff)) + (^vg & (ri - gi + 4*diff))))
	h = (h*hdiv[diff] + 1<<(hsvShift-1)) >> hsvShift
	h += 180 & (h >> 31)
	coef := [3]uint32{1 << 15, t.min[s&255], uint32(t.mid[int(h)*256+int(s)&255])}
	ro := &t.role[h]
	return uint8((vv*coef[ro[0]] + 1<<14) >> 15), uint8((vv*coef[ro[1]] + 1<<14) >> 15), uint8((vv*coef[ro[2]] + 1<<14) >> 15)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
