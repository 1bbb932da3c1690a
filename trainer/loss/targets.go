package loss

import (
	"fmt"
	"math"
	"slices"

	"github.com/segpipe/segpipe/formats/batch"
)

// Targets is one batch's ground truth in the loader's layout: the batch's
// own instance view (batch.Instances: BoxesPerImage, Classes, Boxes in
// input-canvas pixels, the {0,1} Masks stack at prototype resolution,
// IsCrowd), read from a record without a copy (TargetsOf). Where masks
// overlap, the instance with the smaller mask owns the pixel (see the
// package doc). IsCrowd may be nil (no crowd region); the loss leaves
// crowd instances out, as the reference's loader drops them, and
// evaluation reads them as regions to ignore.
type Targets = batch.Instances

// withoutCrowd returns t itself when it has no crowd instance, else its
// other instances copied into dst (whose slices are reused). t has passed
// check, so its arrays agree in length.
func withoutCrowd(t, dst *Targets, cells int) *Targets {
	if !slices.ContainsFunc(t.IsCrowd, func(v uint8) bool { return v != 0 }) {
		return t
	}
	dst.BoxesPerImage = append(dst.BoxesPerImage[:0], t.BoxesPerImage...)
	dst.Classes, dst.Boxes, dst.Masks, dst.IsCrowd = dst.Classes[:0], dst.Boxes[:0], dst.Masks[:0], nil
	k := 0
	for i, n := range t.BoxesPerImage {
		for range n {
			if t.IsCrowd[k] != 0 {
				dst.BoxesPerImage[i]--
			} else {
				dst.Classes = append(dst.Classes, t.Classes[k])
				dst.Boxes = append(dst.Boxes, t.Boxes[4*k:4*k+4]...)
				dst.Masks = append(dst.Masks, t.Masks[k*cells:(k+1)*cells]...)
			}
			k++
		}
	}
	return dst
}

// checkTargets validates t against the geometry, naming the offending
// instance.
func checkTargets(t *Targets, g *Geometry) error { return checkTargetsSized(t, g, len(t.Masks)) }

// checkTargetsSized is checkTargets with the mask stack's length given: the device
// path checks a host record of the targets whose masks stay on the
// device.
func checkTargetsSized(t *Targets, g *Geometry, maskBytes int) error {
	if len(t.BoxesPerImage) != g.B {
		return fmt.Errorf("targets: boxes_per_image has %d images, outputs have %d", len(t.BoxesPerImage), g.B)
	}
	n := 0
	for i, c := range t.BoxesPerImage {
		if c < 0 {
			return fmt.Errorf("targets: image %d: negative box count %d", i, c)
		}
		n += c
	}
	if len(t.Classes) != n || len(t.Boxes) != 4*n {
		return fmt.Errorf("targets: %d classes and %d box values for %d instances", len(t.Classes), len(t.Boxes), n)
	}
	if t.IsCrowd != nil && len(t.IsCrowd) != n {
		return fmt.Errorf("targets: %d crowd flags for %d instances", len(t.IsCrowd), n)
	}
	if maskBytes != n*g.ProtoH*g.ProtoW {
		return fmt.Errorf("targets: mask stack has %d bytes, want N×%d×%d = %d", maskBytes, g.ProtoH, g.ProtoW, n*g.ProtoH*g.ProtoW)
	}
	img, first := 0, 0
	for k := 0; k < n; k++ {
		for img < g.B && k >= first+t.BoxesPerImage[img] {
			first += t.BoxesPerImage[img]
			img++
		}
		if c := t.Classes[k]; c < 0 || int(c) >= g.NC {
			return fmt.Errorf("targets: image %d instance %d: class %d outside [0,%d)", img, k-first, c, g.NC)
		}
		b := t.Boxes[4*k : 4*k+4]
		for _, v := range b {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("targets: image %d instance %d: box %v is not finite", img, k-first, b)
			}
		}
		// A zero-width or zero-height box would divide the mask loss by a
		// zero area; the loader drops such boxes, so refuse them here.
		if !(b[2] > b[0]) || !(b[3] > b[1]) {
			return fmt.Errorf("targets: image %d instance %d: box %v is empty (need x2>x1, y2>y1)", img, k-first, b)
		}
	}
	return nil
}

// padded is the targets regrouped into per-image slots of width M, plus the
// per-pixel instance map both mask terms read.
type padded struct {
	M      int
	labels []int32   // [B, M]
	boxes  []float32 // [B, M, 4]
	valid  []bool    // [B, M]
	offset []int     // first instance of each image in the flat arrays
	// owner is, per image and prototype pixel, 1 + the image-local index of
	// the instance that owns the pixel, 0 for background ([B, Hp, Wp]).
	owner []int32
	// sem is the semantic target at semseg resolution, [B, NC, Hs, Ws].
	sem []float32
	// last is, per image, the image-local index of the instance painted
	// last (the smallest), whose class the semantic background reads.
	last []int
	// paint and area are scratch: one image's painting order and mask
	// areas.
	paint []int
	area  []int
}

// build fills p from t. The owner map paints each image's instances in
// order of decreasing mask area (stable), so the smaller one wins where
// masks overlap whatever order the loader lists them in: the reference's
// overlap map, which sorts its instances by area before composing it.
func (p *padded) build(t *Targets, g *Geometry) {
	B := g.B
	p.M = 0
	for _, c := range t.BoxesPerImage {
		p.M = max(p.M, c)
	}
	M := p.M
	p.labels = growI32(p.labels, B*M)
	p.boxes = growF32(p.boxes, B*M*4)
	p.valid = growBool(p.valid, B*M)
	if cap(p.offset) < B {
		p.offset = make([]int, B)
		p.last = make([]int, B)
	}
	p.offset, p.last = p.offset[:B], p.last[:B]
	hw := g.ProtoH * g.ProtoW
	p.owner = growI32(p.owner, B*hw)
	k := 0
	for b := 0; b < B; b++ {
		p.offset[b] = k
		for j := 0; j < t.BoxesPerImage[b]; j++ {
			s := b*M + j
			p.labels[s] = t.Classes[k]
			copy(p.boxes[4*s:4*s+4], t.Boxes[4*k:4*k+4])
			bx := t.Boxes[4*k : 4*k+4]
			// The reference's mask_gt: a slot is real when its coordinates
			// do not sum to zero.
			p.valid[s] = bx[0]+bx[1]+bx[2]+bx[3] > 0
			k++
		}
		p.paintOwners(t, b, hw)
	}
	p.buildSemantic(t, g)
}

// paintOwners composes image b's owner map, largest mask first.
func (p *padded) paintOwners(t *Targets, b, hw int) {
	n, k0 := t.BoxesPerImage[b], p.offset[b]
	if n == 0 {
		return
	}
	p.paint, p.area = p.paint[:0], p.area[:0]
	for j := range n {
		a := 0
		for _, v := range t.Masks[(k0+j)*hw : (k0+j+1)*hw] {
			if v != 0 {
				a++
			}
		}
		p.paint, p.area = append(p.paint, j), append(p.area, a)
	}
	slices.SortStableFunc(p.paint, func(x, y int) int { return p.area[y] - p.area[x] })
	own := p.owner[b*hw : (b+1)*hw]
	for _, j := range p.paint {
		for i, v := range t.Masks[(k0+j)*hw : (k0+j+1)*hw] {
			if v != 0 {
				own[i] = int32(j + 1)
			}
		}
	}
	p.last[b] = p.paint[n-1]
}

// buildSemantic reproduces the 8.4.2 semantic target: the class of the
// pixel's owner, background reading the class of the image's last
// instance, every channel zero where that value is class 0, then a nearest
// resize to the semseg grid.
func (p *padded) buildSemantic(t *Targets, g *Geometry) {
	B, NC, Hs, Ws := g.B, g.NC, g.SemH, g.SemW
	p.sem = growF32(p.sem, B*NC*Hs*Ws)
	hw := g.ProtoH * g.ProtoW
	for b := 0; b < B; b++ {
		n := t.BoxesPerImage[b]
		if n == 0 {
			continue
		}
		own := p.owner[b*hw : (b+1)*hw]
		bg := t.Classes[p.offset[b]+p.last[b]]
		for y := 0; y < Hs; y++ {
			sy := nearestSrc(y, Hs, g.ProtoH)
			for x := 0; x < Ws; x++ {
				sx := nearestSrc(x, Ws, g.ProtoW)
				c := bg
				if o := own[sy*g.ProtoW+sx]; o > 0 {
					c = t.Classes[p.offset[b]+int(o)-1]
				}
				if c == 0 {
					continue
				}
				p.sem[((b*NC+int(c))*Hs+y)*Ws+x] = 1
			}
		}
	}
}

// nearestSrc is PyTorch's mode="nearest" source index: floor(dst·in/out)
// with the scale in float32, clamped to the input.
func nearestSrc(dst, out, in int) int {
	scale := float32(in) / float32(out)
	return min(int(math.Floor(float64(float32(dst)*scale))), in-1)
}
