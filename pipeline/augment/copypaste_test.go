package augment

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/formats/shard"
	"github.com/segpipe/segpipe/pipeline/geom"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/pipeline/raster"
)

func rect(x0, y0, x1, y1 float32) []float32 { return []float32{x0, y0, x1, y0, x1, y1, x0, y1} }

// gradient is an s×s image whose every pixel differs from its mirror
// image's, with the given instances.
func gradient(s int, polys ...[]float32) Tile {
	img := &Image{W: s, H: s, Pix: make([]byte, 3*s*s)}
	for y := range s {
		for x := range s {
			i := 3 * (y*s + x)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2] = byte(7*x), byte(5*y), byte(x*y)
		}
	}
	t := Tile{Img: img}
	for _, p := range polys {
		t.Instances = append(t.Instances, shard.Instance{Class: int32(len(t.Instances)), Polygons: [][]float32{p}})
	}
	return t
}

// pasteRun is one sample with copy-paste: its labels and image.
type pasteRun struct {
	l      Labels
	img    []byte
	plain  []byte // the sample rendered without the paste
	source []byte // the paste's source rendered alone
	pasted bool
	q      Plan
}

func runPaste(t *testing.T, cfg *Config, seed uint64, sample, partner []Tile) pasteRun {
	t.Helper()
	s := cfg.ImgSz
	rng := order.NewRand(seed, order.StreamSample, 0, 0)
	p := NewPlan(cfg, Train, rng, sample)
	var r pasteRun
	if !WantCopyPaste(cfg, Train, rng) {
		t.Fatalf("seed %d: no copy-paste at %v", seed, cfg.CopyPaste)
	}
	src := sample
	if cfg.CopyPasteMode == PasteMixup {
		src = partner
	}
	r.q = NewPastePlan(cfg, &p, rng, src)
	BuildLabels(&r.l, cfg, &p, sample)
	var ps Paster
	r.pasted = Paste(&r.l, cfg, &r.q, src, 0, &ps)
	r.img, r.plain, r.source = make([]byte, 3*s*s), make([]byte, 3*s*s), make([]byte, 3*s*s)
	if err := Render(r.plain, &p, sample, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	if err := Render(r.source, &r.q, src, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	var parts []Part
	if r.pasted {
		parts = []Part{{Plan: &r.q, Tiles: src}}
	}
	if err := RenderMix(r.img, make([]byte, 3*s*s), &p, sample, parts, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	return r
}

// maskOf rasterises instance k of l at the given stride.
func maskOf(t *testing.T, l *Labels, k, s, stride int) []byte {
	t.Helper()
	g := raster.Grid{Rows: s / stride, Cols: s / stride, Stride: stride}
	m := make([]byte, g.Cells())
	var z raster.Rasterizer
	if err := z.Dense(m, g, l.Rings(nil, k)); err != nil {
		t.Fatal(err)
	}
	return m
}

func ringMask(t *testing.T, rings [][]float32, s, stride int) []byte {
	t.Helper()
	var l Labels
	for _, r := range rings {
		l.Pts = append(l.Pts, r...)
		l.RingEnd = append(l.RingEnd, int32(len(l.Pts)))
	}
	l.InstEnd = []int32{int32(len(l.RingEnd))}
	l.Classes = []int32{0}
	return maskOf(t, &l, 0, s, stride)
}

// Flip mode, p = 1, one square: the square is pasted mirrored left-right
// (x → s−x on an s×s image), box and mask exact, its pixels the mirrored
// image's and every other pixel the sample's; the original stays whole.
func TestCopyPasteFlipPastesTheMirroredSquare(t *testing.T) {
	const s = 32
	cfg := still(s)
	cfg.CopyPaste = 1
	sq := rect(2, 4, 10, 12)
	r := runPaste(t, &cfg, 1, []Tile{gradient(s, sq)}, nil)
	if !r.pasted || r.l.N() != 2 {
		t.Fatalf("pasted %v, %d instances, want the square and its mirror", r.pasted, r.l.N())
	}
	if got, want := box(r.l.Boxes, 0), (geom.Rect{X0: 2, Y0: 4, X1: 10, Y1: 12}); got != want {
		t.Errorf("original box %v, want %v", got, want)
	}
	if got, want := box(r.l.Boxes, 1), (geom.Rect{X0: 22, Y0: 4, X1: 30, Y1: 12}); got != want {
		t.Errorf("pasted box %v, want %v", got, want)
	}
	if r.l.Classes[1] != r.l.Classes[0] {
		t.Errorf("pasted class %d, want %d", r.l.Classes[1], r.l.Classes[0])
	}
	m := maskOf(t, &r.l, 1, s, 1)
	for y := range s {
		for x := range s {
			in := x >= 22 && x < 30 && y >= 4 && y < 12
			if (m[y*s+x] == 1) != in {
				t.Fatalf("pasted mask at (%d,%d) %d, want %v", x, y, m[y*s+x], in)
			}
			for c := range 3 {
				i := c*s*s + y*s + x
				want := r.plain[i]
				if in {
					want = r.plain[c*s*s+y*s+(s-1-x)] // the mirrored image
				}
				if r.img[i] != want {
					t.Fatalf("pixel (%d,%d) channel %d = %d, want %d (pasted %v)", x, y, c, r.img[i], want, in)
				}
			}
		}
	}
	if !slices.Equal(maskOf(t, &r.l, 0, s, 1), ringMask(t, [][]float32{sq}, s, 1)) {
		t.Error("the original square's mask changed")
	}
}

// A candidate whose mirrored box covers 30 % or more of an existing box is
// refused (Ultralytics' IoA rule), the sample left as it was; of two
// candidates only the clear one is pasted; p·n is rounded half to even.
func TestCopyPasteIoARule(t *testing.T) {
	const s = 48
	for _, tc := range []struct {
		name  string
		p     float64
		polys [][]float32
		want  []geom.Rect // the pasted boxes
	}{
		{"on the mirror axis", 1, [][]float32{rect(20, 4, 28, 12)}, nil},
		{"mirror over another box", 1, [][]float32{rect(2, 4, 10, 12), rect(38, 6, 46, 14)}, nil},
		{"IoA 0.4 both ways", 1, [][]float32{rect(2, 4, 10, 14), rect(38, 10, 46, 20)}, nil},
		{"IoA 24/(80+1e-7) both ways", 1, [][]float32{rect(2, 4, 10, 14), rect(38, 11, 46, 21)},
			[]geom.Rect{{X0: 38, Y0: 4, X1: 46, Y1: 14}, {X0: 2, Y0: 11, X1: 10, Y1: 21}}},
		{"one clear, one refused", 1, [][]float32{rect(2, 4, 10, 12), rect(38, 6, 46, 14), rect(20, 30, 24, 40)},
			[]geom.Rect{{X0: 24, Y0: 30, X1: 28, Y1: 40}}},
		{"p·n = 0.5 rounds to 0", 0.5, [][]float32{rect(2, 4, 10, 12)}, nil},
		{"p·n = 1.5 rounds to 2", 0.5, [][]float32{rect(2, 2, 6, 6), rect(2, 20, 6, 24), rect(2, 36, 6, 40)},
			[]geom.Rect{{X0: 42, Y0: 2, X1: 46, Y1: 6}, {X0: 42, Y0: 20, X1: 46, Y1: 24}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := still(s)
			cfg.CopyPaste = tc.p
			r := runPaste(t, &cfg, 1, []Tile{gradient(s, tc.polys...)}, nil)
			n := len(tc.polys)
			if r.pasted != (len(tc.want) > 0) || r.l.N() != n+len(tc.want) {
				t.Fatalf("pasted %v, %d instances, want %d pasted", r.pasted, r.l.N(), len(tc.want))
			}
			for i, w := range tc.want {
				if got := box(r.l.Boxes, n+i); got != w {
					t.Errorf("pasted %d: box %v, want %v", i, got, w)
				}
			}
			if !r.pasted && !slices.Equal(r.img, r.plain) {
				t.Error("nothing pasted, yet the image changed")
			}
		})
	}
}

// A paste cuts what it covers out of the instance below: the lower
// instance's mask is its own less the pasted one's, cell for cell at
// strides 1, 2 and 4, and its box shrinks to what is left; one left with
// a strip past the candidate rule is dropped and counted.
func TestCopyPasteOccludesTheInstanceBelow(t *testing.T) {
	const s = 48
	sq := rect(2, 4, 10, 12) // mirrored: [38, 46]×[4, 12]
	t.Run("cut", func(t *testing.T) {
		cfg := still(s)
		cfg.CopyPaste = 1
		low := rect(38, 8, 46, 40) // IoA 32/256 with the mirror
		r := runPaste(t, &cfg, 1, []Tile{gradient(s, sq, low)}, nil)
		if r.l.N() != 3 {
			t.Fatalf("%d instances, want 3", r.l.N())
		}
		if got, want := box(r.l.Boxes, 1), (geom.Rect{X0: 38, Y0: 12, X1: 46, Y1: 40}); got != want {
			t.Errorf("cut box %v, want %v", got, want)
		}
		for _, stride := range []int{1, 2, 4} {
			got := maskOf(t, &r.l, 1, s, stride)
			below, above := ringMask(t, [][]float32{low}, s, stride), maskOf(t, &r.l, 2, s, stride)
			for i := range got {
				if want := below[i] &^ above[i]; got[i] != want {
					t.Fatalf("stride %d cell %d: %d, want %d (below %d, pasted %d)", stride, i, got[i], want, below[i], above[i])
				}
			}
		}
	})
	t.Run("drop", func(t *testing.T) {
		cfg := still(s)
		cfg.CopyPaste = 1
		// A square under the mirror with a 1.5 px tail: the tail alone is
		// 2 px wide on the lattice, not more than MinSide.
		low := []float32{38, 4, 46, 4, 46, 12, 39.5, 12, 39.5, 44, 38, 44}
		r := runPaste(t, &cfg, 1, []Tile{gradient(s, sq, low)}, nil)
		if r.l.N() != 2 || r.l.Classes[1] != 0 || r.l.Dropped != 1 {
			t.Fatalf("%d instances (classes %v), %d dropped; want the square and its mirror, 1 dropped", r.l.N(), r.l.Classes, r.l.Dropped)
		}
	})
}

// Mixup mode takes the instances of a second sample: one clear of the
// sample's boxes is pasted with its class, box and mask, its pixels the
// partner's; one over a box is not; with probability 0 nothing is drawn.
func TestCopyPasteMixupTakesThePartnersInstances(t *testing.T) {
	const s = 32
	cfg := still(s)
	cfg.CopyPaste, cfg.CopyPasteMode = 1, PasteMixup
	sample := []Tile{gradient(s, rect(2, 2, 10, 10))}
	clearOne := gradient(s, rect(4, 3, 9, 9), rect(20, 18, 28, 30)) // the first overlaps the sample's box
	for i := range clearOne.Img.Pix {
		clearOne.Img.Pix[i] = 255 - clearOne.Img.Pix[i]
	}
	r := runPaste(t, &cfg, 2, sample, []Tile{clearOne})
	if !r.pasted || r.l.N() != 2 || r.l.Classes[1] != 1 {
		t.Fatalf("pasted %v, classes %v; want the partner's second instance", r.pasted, r.l.Classes)
	}
	if got, want := box(r.l.Boxes, 1), (geom.Rect{X0: 20, Y0: 18, X1: 28, Y1: 30}); got != want {
		t.Errorf("pasted box %v, want %v", got, want)
	}
	m := maskOf(t, &r.l, 1, s, 1)
	for i := range s * s {
		for c := range 3 {
			want := r.plain[c*s*s+i]
			if m[i] == 1 {
				want = r.source[c*s*s+i]
			}
			if r.img[c*s*s+i] != want {
				t.Fatalf("pixel %d channel %d: %d, want %d (pasted %v)", i, c, r.img[c*s*s+i], want, m[i] == 1)
			}
		}
	}
	rng := order.NewRand(2, order.StreamSample, 0, 0)
	next := *rng
	cfg.CopyPaste = 0
	if WantCopyPaste(&cfg, Train, rng) || *rng != next {
		t.Error("copy_paste 0: a paste, or a draw taken")
	}
	cfg.CopyPaste = 1
	if WantCopyPaste(&cfg, TrainNoMosaic, rng) || WantCopyPaste(&cfg, Val, rng) || *rng != next {
		t.Error("a paste, or a draw, outside Train")
	}
}

// Property: on random scenes of disjoint rectangles, under any paste,
// every kept instance's box holds its mask cells at strides 1 and 4 and
// lies within one cell of their bounds at stride 1 (a cut instance's box
// is the bounds of what is left of it, which a part narrower than a cell
// at stride 4 may leave without a cell centre, as it would any polygon),
// and no two kept instances share a cell (the originals are disjoint, and
// each paste is cut out of everything below it).
func TestCopyPasteKeepsBoxesAndMasksTogether(t *testing.T) {
	const s = 64
	rng := rand.New(rand.NewPCG(7, 7))
	n := 400
	if testing.Short() {
		n = 60
	}
	pastes, cuts := 0, 0
	for it := range n {
		cfg := still(s)
		cfg.CopyPaste = float64(1+rng.IntN(4)) / 4
		var polys [][]float32
		var boxes []geom.Rect
		for range 1 + rng.IntN(8) {
			x, y := float32(rng.IntN(s-12)), float32(rng.IntN(s-12))
			w, h := float32(8+rng.IntN(s/2)), float32(8+rng.IntN(s/2))
			b := geom.Rect{X0: x, Y0: y, X1: min(x+w, s), Y1: min(y+h, s)}
			if !slices.ContainsFunc(boxes, func(o geom.Rect) bool { return overlaps(o, b) }) {
				boxes = append(boxes, b)
				polys = append(polys, rect(b.X0, b.Y0, b.X1, b.Y1))
			}
		}
		r := runPaste(t, &cfg, uint64(it), []Tile{gradient(s, polys...)}, nil)
		if r.pasted {
			pastes++
		}
		for k := range r.l.N() {
			r0 := int32(0)
			if k > 0 {
				r0 = r.l.InstEnd[k-1]
			}
			if r.l.InstEnd[k]-r0 > 1 {
				cuts++ // a cut instance is rectangles; an original is one ring
			}
		}
		for _, stride := range []int{1, 4} {
			masks := make([][]byte, r.l.N())
			for k := range r.l.N() {
				masks[k] = maskOf(t, &r.l, k, s, stride)
				bx := box(r.l.Boxes, k)
				lo, hi := [2]float32{s, s}, [2]float32{-1, -1}
				for i, v := range masks[k] {
					if v == 1 {
						cx := float32(i%(s/stride)*stride) + float32(stride)/2
						cy := float32(i/(s/stride)*stride) + float32(stride)/2
						lo, hi = [2]float32{min(lo[0], cx), min(lo[1], cy)}, [2]float32{max(hi[0], cx), max(hi[1], cy)}
					}
				}
				if hi[0] < 0 {
					if stride == 1 {
						t.Fatalf("scene %d instance %d: kept with no pixel", it, k)
					}
					continue
				}
				far := float32(stride)
				if bx.X0 > lo[0] || bx.Y0 > lo[1] || bx.X1 < hi[0] || bx.Y1 < hi[1] ||
					stride == 1 && (lo[0]-bx.X0 > far || lo[1]-bx.Y0 > far || bx.X1-hi[0] > far || bx.Y1-hi[1] > far) {
					t.Fatalf("scene %d instance %d stride %d: box %v, mask cell centres [%v, %v]", it, k, stride, bx, lo, hi)
				}
			}
			for j := range r.l.N() {
				for k := range j {
					for i := range masks[j] {
						if masks[j][i]&masks[k][i] == 1 {
							t.Fatalf("scene %d stride %d: instances %d and %d share cell %d (classes %v)", it, stride, j, k, i, r.l.Classes)
						}
					}
				}
			}
		}
	}
	if pastes < n/4 || cuts == 0 {
		t.Errorf("%d of %d scenes pasted anything, %d instances cut: the property was barely exercised", pastes, n, cuts)
	}
}

// BenchmarkPasteFlip is a flip-mode paste of a 640 px scene of twelve
// rectangles: the selection, the cut of the instances below and the pixel
// mask (Render not included).
func BenchmarkPasteFlip(b *testing.B) {
	const s = 640
	cfg := still(s)
	cfg.CopyPaste = 1
	var polys [][]float32
	for i := range 12 {
		x, y := float32(20+i*25), float32(30+(i%4)*140)
		polys = append(polys, rect(x, y, x+60, y+110))
	}
	tiles := []Tile{gradient(s, polys...)}
	rng := order.NewRand(1, order.StreamSample, 0, 0)
	p := NewPlan(&cfg, Train, rng, tiles)
	q := NewPastePlan(&cfg, &p, rng, tiles)
	var l Labels
	var ps Paster
	for b.Loop() {
		l.Reset()
		BuildLabels(&l, &cfg, &p, tiles)
		if !Paste(&l, &cfg, &q, tiles, 0, &ps) {
			b.Fatal("nothing pasted")
		}
	}
}

// A mixup partner goes through the sample's pre-transform, flip-mode
// CopyPaste included (Ultralytics' MixUp(pre_transform=...)): its square is
// pasted mirrored among its own instances (l[from:], not measured against
// the sample's), and the blend takes the partner's image with the pasted
// pixels.
func TestMixupPartnerGetsItsOwnFlipPaste(t *testing.T) {
	const s = 32
	cfg := still(s)
	cfg.CopyPaste, cfg.Mixup = 1, 1
	// The sample's square lies where the partner's mirror lands: a
	// partner candidate measured against the sample would be refused.
	ta := []Tile{gradient(s, rect(22, 4, 30, 12))}
	tb := []Tile{gradient(s, rect(2, 4, 10, 12))}
	for i := 0; i < len(tb[0].Img.Pix); i += 3 { // the partner in other colours
		tb[0].Img.Pix[i], tb[0].Img.Pix[i+2] = tb[0].Img.Pix[i+2], 255-tb[0].Img.Pix[i]
	}
	rng := order.NewRand(3, order.StreamSample, 0, 0)
	p := NewPlan(&cfg, Train, rng, ta)
	if !WantCopyPaste(&cfg, Train, rng) || !WantMixup(&cfg, Train, rng) {
		t.Fatal("copy-paste and mixup at 1 not drawn")
	}
	q := NewMixPlan(&cfg, &p, rng, tb)
	var l Labels
	BuildLabels(&l, &cfg, &p, ta)
	from := l.N()
	BuildLabels(&l, &cfg, &q, tb)
	var pp PartnerPaste
	if !pp.Apply(&cfg, &q, rng, tb, &l, from) {
		t.Fatal("the partner's square was not pasted")
	}
	wantBoxes := []float32{22, 4, 30, 12, 2, 4, 10, 12, 22, 4, 30, 12}
	if !slices.Equal(l.Boxes, wantBoxes) {
		t.Fatalf("boxes %v, want the sample's, the partner's and its mirror %v", l.Boxes, wantBoxes)
	}
	img := make([]byte, 3*s*s)
	parts := []Part{{Plan: &q, Tiles: tb, Paste: pp.Part()}}
	if got, want := MixScratch(len(img), parts), 2*len(img); got != want {
		t.Fatalf("MixScratch %d, want %d", got, want)
	}
	if err := RenderMix(img, make([]byte, len(img)), &p, ta, parts, cfg.Fill); err == nil {
		t.Error("RenderMix took a scratch too short for the partner's paste")
	}
	if err := RenderMix(img, make([]byte, 2*len(img)), &p, ta, parts, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	ia, ib := make([]byte, len(img)), make([]byte, len(img))
	if err := Render(ia, &p, ta, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	if err := Render(ib, &q, tb, cfg.Fill); err != nil {
		t.Fatal(err)
	}
	r := q.MixWeight()
	for c := range 3 {
		for y := range s {
			for x := range s {
				i := c*s*s + y*s + x
				b := ib[i]
				if x >= 22 && x < 30 && y >= 4 && y < 12 {
					b = ib[c*s*s+y*s+(s-1-x)] // the partner's mirrored pixels
				}
				if want := byte(math.Floor(float64(ia[i])*r + float64(b)*(1-r))); img[i] != want {
					t.Fatalf("pixel (%d,%d) channel %d = %d, want %d", x, y, c, img[i], want)
				}
			}
		}
	}
}

// A cutmix partner is pasted into before its region is chosen (CutMix's
// partner goes through the same pre-transform): its mirrored instance is
// among the labels the region is measured against and cut from, and the
// region's pixels are the partner's with the pasted ones. In mixup mode,
// or without pp, the partner is left as drawn.
func TestCutmixPartnerGetsItsOwnFlipPaste(t *testing.T) {
	const s = 32
	cfg := still(s)
	cfg.CopyPaste, cfg.Cutmix = 1, 1
	ta := []Tile{gradient(s)}                     // no instance: every region is clear
	tb := []Tile{gradient(s, rect(1, 1, 15, 31))} // mirrored to 17..31
	for i := 0; i < len(tb[0].Img.Pix); i += 3 {
		tb[0].Img.Pix[i], tb[0].Img.Pix[i+2] = tb[0].Img.Pix[i+2], 255-tb[0].Img.Pix[i]
	}
	var pp PartnerPaste
	if (&PartnerPaste{}).Part() != nil || (*PartnerPaste)(nil).Part() != nil {
		t.Fatal("a PartnerPaste that pasted nothing has a Part")
	}
	mixupMode := cfg
	mixupMode.CopyPasteMode = PasteMixup
	var l0, part0 Labels
	rng0 := order.NewRand(1, order.StreamSample, 0, 0)
	p0 := NewPlan(&mixupMode, Train, rng0, ta)
	if _, _ = NewCutPlan(&mixupMode, &p0, rng0, tb, &l0, &part0, &pp); part0.N() != 1 || pp.Part() != nil {
		t.Fatalf("mixup mode without a source: partner has %d instances, paste %v; want it as drawn", part0.N(), pp.Part() != nil)
	}
	// Mixup mode with a source: the source's instance, where it lands,
	// joins the partner's (a square clear of the partner's).
	pp.Src = []Tile{gradient(s, rect(18, 2, 30, 14))}
	for seed := uint64(1); ; seed++ {
		if seed == 40 {
			t.Fatal("mixup mode: no seed pasted the source's square")
		}
		rng := order.NewRand(seed, order.StreamSample, 0, 0)
		p := NewPlan(&mixupMode, Train, rng, ta)
		var l, part Labels
		NewCutPlan(&mixupMode, &p, rng, tb, &l, &part, &pp)
		if pp.Part() == nil {
			continue
		}
		if part.N() != 2 || pp.Part().Tiles[0].Img != pp.Src[0].Img {
			t.Fatalf("seed %d: mixup mode pasted into a partner of %d instances from %v, want 2 from Src", seed, part.N(), pp.Part().Tiles)
		}
		break
	}
	pp.Src = nil
	checked, reached := 0, 0
	for seed := uint64(1); seed < 60 && (checked < 3 || reached == 0); seed++ {
		rng := order.NewRand(seed, order.StreamSample, 0, 0)
		p := NewPlan(&cfg, Train, rng, ta)
		var l, part Labels
		q, ok := NewCutPlan(&cfg, &p, rng, tb, &l, &part, &pp)
		if part.N() != 2 || pp.Part() == nil {
			t.Fatalf("seed %d: partner has %d instances, paste %v; want its square and the mirror", seed, part.N(), pp.Part() != nil)
		}
		if !ok {
			continue
		}
		cut, _ := q.CutRegion()
		AppendCut(&l, &q, &part)
		mirrorCut := cut.X1 > 17 // the region reaches the pasted instance
		found := false
		for k := 0; k < l.N(); k++ {
			found = found || box(l.Boxes, k).X0 >= 17
		}
		if mirrorCut {
			reached++
		}
		if found != mirrorCut {
			t.Errorf("seed %d: region %v, pasted instance cut in %v, want %v", seed, cut, found, mirrorCut)
		}
		img := make([]byte, 3*s*s)
		parts := []Part{{Plan: &q, Tiles: tb, Paste: pp.Part()}}
		if err := RenderMix(img, make([]byte, MixScratch(len(img), parts)), &p, ta, parts, cfg.Fill); err != nil {
			t.Fatal(err)
		}
		ia, ib, src := make([]byte, len(img)), make([]byte, len(img)), make([]byte, len(img))
		for _, r := range []struct {
			dst []byte
			q   *Plan
			t   []Tile
		}{{ia, &p, ta}, {ib, &q, tb}, {src, &pp.plan, tb}} {
			if err := Render(r.dst, r.q, r.t, cfg.Fill); err != nil {
				t.Fatal(err)
			}
		}
		for c := range 3 {
			for y := range s {
				for x := range s {
					i := c*s*s + y*s + x
					want := ia[i]
					if float32(x) >= cut.X0 && float32(x) < cut.X1 && float32(y) >= cut.Y0 && float32(y) < cut.Y1 {
						want = ib[i]
						if pp.paster.mask[y*s+x] == 1 {
							want = src[i]
						}
					}
					if img[i] != want {
						t.Fatalf("seed %d: pixel (%d,%d) channel %d = %d, want %d (region %v)", seed, x, y, c, img[i], want, cut)
					}
				}
			}
		}
		checked++
	}
	if reached == 0 {
		t.Fatalf("%d cuts, none reaching the pasted instance", checked)
	}
}
