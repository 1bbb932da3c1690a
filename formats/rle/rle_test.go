package rle

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestEncodeKnownStrings(t *testing.T) {
	tests := []struct {
		counts []uint32
		want   string
	}{
		{nil, ""},
		{[]uint32{0}, "0"},
		{[]uint32{6}, "6"},
		{[]uint32{16}, "`0"},                 // bit 0x10 set needs a continuation group
		{[]uint32{2, 3, 4, 1}, "234N"},       // i=3 stores 1-3 = -2: 0x1e, no continuation
		{[]uint32{100, 5, 100, 5}, "T35T30"}, // i=2 is absolute, only i > 2 are deltas
	}
	for _, tc := range tests {
		got := Encode(tc.counts)
		if got != tc.want {
			t.Errorf("Encode(%v) = %q, want %q", tc.counts, got, tc.want)
		}
		back, err := Decode(tc.want)
		if err != nil || len(back) != len(tc.counts) {
			t.Errorf("Decode(%q) = %v, %v", tc.want, back, err)
			continue
		}
		for i := range back {
			if back[i] != tc.counts[i] {
				t.Errorf("Decode(%q)[%d] = %d, want %d", tc.want, i, back[i], tc.counts[i])
			}
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	for _, s := range []string{
		"`",         // continuation bit set, string ends
		"0 ",        // byte below '0'
		"0p",        // byte above 'o'
		"1N",        // second count is absolute: -2
		"000N",      // i=3: 0 + (-2) < 0
		"````````0", // 9 groups: beyond any uint32
		"oooooo?",   // 7 groups decoding past 2^32
	} {
		_, err := Decode(s)
		if err == nil {
			t.Errorf("Decode(%q) succeeded, want error", s)
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q): error %v does not wrap ErrMalformed", s, err)
		}
	}
	if _, err := FromString("6", 2, 2); err == nil {
		t.Error("FromString accepted counts summing to 6 for 4 pixels")
	}
}

func TestRoundTripRandomCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 2000; n++ {
		m := r.IntN(20)
		cnts := make([]uint32, m)
		for i := range cnts {
			switch r.IntN(4) {
			case 0:
				cnts[i] = 0
			case 1:
				cnts[i] = r.Uint32()
			default:
				cnts[i] = uint32(r.IntN(1000))
			}
		}
		s := Encode(cnts)
		back, err := Decode(s)
		if err != nil {
			t.Fatalf("Decode(Encode(%v)): %v", cnts, err)
		}
		if len(back) != len(cnts) {
			t.Fatalf("round trip of %v gave %v", cnts, back)
		}
		for i := range back {
			if back[i] != cnts[i] {
				t.Fatalf("round trip of %v gave %v", cnts, back)
			}
		}
	}
}

func randomMask(r *rand.Rand, h, w int, p float64) []byte {
	m := make([]byte, h*w)
	// blobs rather than noise so runs are long and boxes meaningful
	for k := 0; k < 3; k++ {
		x0, y0 := r.IntN(w+1), r.IntN(h+1)
		x1, y1 := x0+r.IntN(w/2+1), y0+r.IntN(h/2+1)
		for y := y0; y < min(y1, h); y++ {
			for x := x0; x < min(x1, w); x++ {
				if r.Float64() < p {
					m[y*w+x] = 1
				}
			}
		}
	}
	return m
}

func denseIoU(a, b []byte, crowd bool) float64 {
	var i, u, da int
	for k := range a {
		if a[k] != 0 {
			da++
		}
		if a[k] != 0 && b[k] != 0 {
			i++
		}
		if a[k] != 0 || b[k] != 0 {
			u++
		}
	}
	if i == 0 {
		return 0
	}
	if crowd {
		u = da
	}
	return float64(i) / float64(u)
}

// TestRunOpsMatchDense checks FromMask, Mask, Area, Bbox, Merge, Intersect
// and IoU against brute force on dense masks.
func TestRunOpsMatchDense(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 500; n++ {
		h, w := 1+r.IntN(17), 1+r.IntN(17)
		a := randomMask(r, h, w, 0.8)
		b := randomMask(r, h, w, 0.8)
		ra, _ := FromMask(a, h, w)
		rb, _ := FromMask(b, h, w)
		if err := ra.Validate(); err != nil {
			t.Fatal(err)
		}
		back, err := ra.Mask(nil)
		if err != nil {
			t.Fatal(err)
		}
		area, x0, y0, x1, y1 := 0, w, h, -1, -1
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				if back[y*w+x] != a[y*w+x] {
					t.Fatalf("Mask(FromMask(m)) != m at (%d,%d)", x, y)
				}
				if a[y*w+x] != 0 {
					area++
					x0, y0, x1, y1 = min(x0, x), min(y0, y), max(x1, x), max(y1, y)
				}
			}
		}
		if ra.Area() != area {
			t.Fatalf("Area %d, want %d", ra.Area(), area)
		}
		if area > 0 {
			bb := ra.Bbox()
			// rleToBbox widens to full height when a run spans columns.
			if bb[0] != float64(x0) || bb[2] != float64(x1-x0+1) || bb[1] > float64(y0) || bb[1]+bb[3] < float64(y1+1) {
				t.Fatalf("Bbox %v does not cover x %d..%d y %d..%d", bb, x0, x1, y0, y1)
			}
		}
		for _, crowd := range []bool{false, true} {
			got := IoU(ra, rb, crowd)
			want := denseIoU(a, b, crowd)
			if got != want {
				t.Fatalf("IoU crowd=%v = %v, want %v", crowd, got, want)
			}
		}
		u, err := Merge([]RLE{ra, rb})
		if err != nil {
			t.Fatal(err)
		}
		in, _ := Intersect([]RLE{ra, rb})
		um, _ := u.Mask(nil)
		im, _ := in.Mask(nil)
		for k := range a {
			if um[k] != a[k]|b[k] || im[k] != a[k]&b[k] {
				t.Fatalf("Merge/Intersect wrong at %d", k)
			}
		}
		if Encode(u.Counts) != Encode(mustFromMask(um, h, w).Counts) {
			t.Fatalf("Merge runs not canonical")
		}
	}
}

func mustFromMask(m []byte, h, w int) RLE {
	r, err := FromMask(m, h, w)
	if err != nil {
		panic(err)
	}
	return r
}

// TestFromPolygonAxisRectangle checks rleFrPoly's convention on a rectangle
// with integer corners: pixel columns x0..x1-1 and rows y0..y1-1 are set.
func TestFromPolygonAxisRectangle(t *testing.T) {
	r, err := FromBox([4]float64{2, 3, 4, 5}, 10, 12)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := r.Mask(nil)
	for y := 0; y < 10; y++ {
		for x := 0; x < 12; x++ {
			want := byte(0)
			if x >= 2 && x < 6 && y >= 3 && y < 8 {
				want = 1
			}
			if m[y*12+x] != want {
				t.Fatalf("pixel (%d,%d) = %d, want %d", x, y, m[y*12+x], want)
			}
		}
	}
	if r.Bbox() != [4]float64{2, 3, 4, 5} {
		t.Errorf("Bbox = %v", r.Bbox())
	}
}

func TestFromPolygonRejectsBadInput(t *testing.T) {
	nan := []float64{0, 0, 1e300, 0, 1, 1}
	if _, err := FromPolygon(nan, 10, 10); err == nil {
		t.Error("huge coordinate accepted")
	}
	if r, err := FromPolygon([]float64{1, 1, 5}, 10, 10); err != nil || r.Area() != 0 {
		t.Errorf("one-vertex polygon: %v area %d, want empty", err, r.Area())
	}
	if _, err := FromMask(make([]byte, 5), 2, 3); err == nil {
		t.Error("short mask accepted")
	}
	if _, err := Merge([]RLE{{H: 2, W: 2, Counts: []uint32{4}}, {H: 3, W: 2, Counts: []uint32{6}}}); err == nil {
		t.Error("size mismatch merged")
	}
	if IoU(RLE{H: 2, W: 2, Counts: []uint32{0, 4}}, RLE{H: 4, W: 1, Counts: []uint32{0, 4}}, false) != -1 {
		t.Error("size mismatch IoU not -1")
	}
}

// TestPolygonPartsAreUnion checks that FromPolygons equals the dense union
// of its parts.
func TestPolygonPartsAreUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 200; n++ {
		h, w := 5+r.IntN(30), 5+r.IntN(30)
		var polys [][]float64
		for k := 0; k < 1+r.IntN(3); k++ {
			var p []float64
			for v := 0; v < 3+r.IntN(5); v++ {
				p = append(p, r.Float64()*float64(w+4)-2, r.Float64()*float64(h+4)-2)
			}
			polys = append(polys, p)
		}
		got, err := FromPolygons(polys, h, w)
		if err != nil {
			t.Fatal(err)
		}
		union := make([]byte, h*w)
		for _, p := range polys {
			pr, err := FromPolygon(p, h, w)
			if err != nil {
				t.Fatal(err)
			}
			if err := pr.Validate(); err != nil {
				t.Fatalf("polygon %v: %v", p, err)
			}
			pm, _ := pr.Mask(nil)
			for i := range union {
				union[i] |= pm[i]
			}
		}
		gm, _ := got.Mask(nil)
		for i := range union {
			if gm[i] != union[i] {
				t.Fatalf("union differs at %d", i)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "0", "P0", "b_d03[76J4M3M3N2N1", "`", "1_", "ooooooo0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cnts, err := Decode(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Any accepted string decodes to counts whose encoding decodes to
		// the same counts (the string itself may be non-canonical).
		again, err := Decode(Encode(cnts))
		if err != nil || len(again) != len(cnts) {
			t.Fatalf("re-decode: %v %v", again, err)
		}
		for i := range cnts {
			if again[i] != cnts[i] {
				t.Fatalf("re-decode mismatch at %d", i)
			}
		}
		var sum uint64
		for _, c := range cnts {
			sum += uint64(c)
		}
		if sum <= 1<<16 && sum > 0 {
			r := RLE{H: 1, W: int(sum), Counts: cnts}
			_ = r.Bbox()
			_ = IoU(r, r, false)
			if m, err := r.Mask(nil); err != nil || len(m) != int(sum) {
				t.Fatalf("Mask: %v", err)
			}
		}
	})
}

func FuzzFromPolygon(f *testing.F) {
	f.Add(1.0, 2.0, 8.5, 3.2, 4.4, 9.9, -3.0, 5.0, 12, 9)
	f.Fuzz(func(t *testing.T, x0, y0, x1, y1, x2, y2, x3, y3 float64, h, w int) {
		h, w = h%64, w%64
		if h < 0 || w < 0 {
			return
		}
		for _, v := range []float64{x0, y0, x1, y1, x2, y2, x3, y3} {
			if v > 200 || v < -200 {
				return // keep each run cheap; MaxCoord is tested elsewhere
			}
		}
		r, err := FromPolygon([]float64{x0, y0, x1, y1, x2, y2, x3, y3}, h, w)
		if err != nil {
			if x0 == x0 && y0 == y0 && x1 == x1 && y1 == y1 && x2 == x2 && y2 == y2 && x3 == x3 && y3 == y3 {
				t.Fatalf("finite polygon rejected: %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("invalid RLE: %v", err)
		}
	})
}

// TestIoUMatrixEqualsIoU checks the column-span pre-test against rleIou's
// box pre-test on random masks, including empty masks and size mismatches.
func TestIoUMatrixEqualsIoU(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for n := 0; n < 300; n++ {
		h, w := 1+r.IntN(12), 1+r.IntN(12)
		var dts, gts []RLE
		var crowd []bool
		for k := 0; k < 1+r.IntN(5); k++ {
			dts = append(dts, mustFromMask(randomMask(r, h, w, 0.7), h, w))
		}
		for k := 0; k < 1+r.IntN(5); k++ {
			gh := h
			if r.IntN(10) == 0 {
				gh = h + 1
			}
			gts = append(gts, mustFromMask(randomMask(r, gh, w, 0.7), gh, w))
			crowd = append(crowd, r.IntN(3) == 0)
		}
		out := make([]float64, len(dts)*len(gts))
		IoUMatrix(out, dts, gts, crowd)
		for d := range dts {
			for g := range gts {
				if want := IoU(dts[d], gts[g], crowd[g]); out[d*len(gts)+g] != want {
					t.Fatalf("IoUMatrix[%d][%d] = %v, IoU = %v", d, g, out[d*len(gts)+g], want)
				}
			}
		}
	}
}

// TestMismatchedCountsTerminate covers hand-built RLEs whose counts do not
// cover the same pixels, on which maskApi.c's loops never end.
func TestMismatchedCountsTerminate(t *testing.T) {
	a := RLE{H: 4, W: 4, Counts: []uint32{0, 10}}
	b := RLE{H: 4, W: 4, Counts: []uint32{0, 16}}
	if got := IoU(a, b, false); got != -1 {
		t.Errorf("IoU = %v, want -1", got)
	}
	out := make([]float64, 1)
	IoUMatrix(out, []RLE{a}, []RLE{b}, nil)
	if out[0] != -1 {
		t.Errorf("IoUMatrix = %v, want -1", out[0])
	}
	if _, err := Merge([]RLE{a, b}); !errors.Is(err, ErrMalformed) {
		t.Errorf("Merge error %v, want ErrMalformed", err)
	}
}

// FuzzIoUCounts holds IoU, Merge and Intersect to their definitions on
// arbitrary runs: as given (which need not cover the same pixels), padded
// to one valid h×w image, and in canonical form against dense masks.
func FuzzIoUCounts(f *testing.F) {
	f.Add([]byte{0, 3, 2, 1}, []byte{1, 1, 4}, byte(0))
	f.Add([]byte{0, 0, 3, 2}, []byte{2, 5}, byte(2))
	f.Add([]byte{5, 7, 1, 3}, []byte{5, 7, 1, 3}, byte(3))
	f.Fuzz(func(t *testing.T, x, y []byte, hb byte) {
		if len(x) > 64 || len(y) > 64 {
			return
		}
		counts := func(b []byte, total int) []uint32 {
			c := make([]uint32, len(b), len(b)+1)
			sum := 0
			for i, v := range b {
				c[i] = uint32(v)
				sum += int(v)
			}
			if sum < total {
				c = append(c, uint32(total-sum))
			}
			return c
		}
		for _, crowd := range []bool{false, true} {
			a, b := RLE{H: 1, W: 1 << 16, Counts: counts(x, 0)}, RLE{H: 1, W: 1 << 16, Counts: counts(y, 0)}
			if v := IoU(a, b, crowd); v != -1 && !(v >= 0 && v <= 1) {
				t.Fatalf("IoU(%v, %v, crowd=%v) = %v: neither -1 nor in [0,1]", a.Counts, b.Counts, crowd, v)
			}
			_, _ = Merge([]RLE{a, b})
			_, _ = Intersect([]RLE{a, b})
		}

		h := 1 + int(hb%16)
		n := 0
		for _, b := range [][]byte{x, y} {
			s := 0
			for _, v := range b {
				s += int(v)
			}
			n = max(n, s)
		}
		w := max(1, (n+h-1)/h)
		a, b := RLE{H: h, W: w, Counts: counts(x, h*w)}, RLE{H: h, W: w, Counts: counts(y, h*w)}
		for _, r := range []RLE{a, b} {
			if err := r.Validate(); err != nil {
				t.Fatalf("padded runs %v: %v", r.Counts, err)
			}
		}
		ma, err := a.Mask(nil)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := b.Mask(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, crowd := range []bool{false, true} {
			if v := IoU(a, b, crowd); !(v >= 0 && v <= 1) {
				t.Fatalf("IoU(%v, %v, crowd=%v) on one %dx%d image = %v, not in [0,1]", a.Counts, b.Counts, crowd, h, w, v)
			}
		}
		// Interior zero runs end rleMerge's loop early, in pycocotools
		// too, so on these runs Merge and Intersect are only held to not
		// panic; their exact results are checked on canonical runs below.
		_, _ = Merge([]RLE{a, b})
		_, _ = Intersect([]RLE{a, b})

		// Canonical runs, as FromMask and the evaluator's masks have them.
		// (Non-canonical ones inherit rleToBbox's quirks, which can zero a
		// box, so the exact equalities below are for canonical runs.)
		ca, cb := mustFromMask(ma, h, w), mustFromMask(mb, h, w)
		u, err := Merge([]RLE{ca, cb})
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		in, err := Intersect([]RLE{ca, cb})
		if err != nil {
			t.Fatalf("Intersect: %v", err)
		}
		um, err := u.Mask(nil)
		if err != nil {
			t.Fatalf("Merge result: %v", err)
		}
		im, err := in.Mask(nil)
		if err != nil {
			t.Fatalf("Intersect result: %v", err)
		}
		for k := range ma {
			if um[k] != ma[k]|mb[k] || im[k] != ma[k]&mb[k] {
				t.Fatalf("Merge/Intersect of %v and %v wrong at pixel %d", ca.Counts, cb.Counts, k)
			}
		}

		for _, crowd := range []bool{false, true} {
			if got, want := IoU(ca, cb, crowd), denseIoU(ma, mb, crowd); got != want {
				t.Fatalf("IoU(%v, %v, crowd=%v) = %v, dense %v", ca.Counts, cb.Counts, crowd, got, want)
			}
			if ca.Area() > 0 {
				if v := IoU(ca, ca, crowd); v != 1 {
					t.Fatalf("IoU(r, r, crowd=%v) = %v for non-empty r %v", crowd, v, ca.Counts)
				}
			}
		}
		if ab, ba := IoU(ca, cb, false), IoU(cb, ca, false); ab != ba {
			t.Fatalf("IoU not symmetric: %v vs %v", ab, ba)
		}
		if in.Area() > 0 {
			if got, want := IoU(ca, cb, false), float64(in.Area())/float64(u.Area()); got != want {
				t.Fatalf("IoU %v, Intersect/Merge areas give %v", got, want)
			}
		}
	})
}
