package loss

import "math"

// cropRoundBelow is the per-image positive count under which the
// reference's CPU crop_mask rounds the box to integers (round half to even)
// before cropping; at or above it the fractional box is compared directly.
const cropRoundBelow = 50

// maskScratch holds the batch's positives gathered into a padded
// [B, Pmax] layout and the per-row logit buffer.
type maskScratch struct {
	pmax   int
	count  []int
	anchor []int32     // [B, Pmax], -1 on padding rows
	gt     []int32     // [B, Pmax], -1 (the unassigned sentinel) on padding rows
	z      [][]float64 // per-worker logit scratch
	perImg []float64
}

// gather lays out the positives of every image in anchor order, padded to
// the largest count with the -1 sentinel.
func (m *maskScratch) gather(asg *Assignment) {
	B, A := asg.B, asg.A
	if cap(m.count) < B {
		m.count = make([]int, B)
	}
	m.count = m.count[:B]
	m.pmax = 0
	for b := 0; b < B; b++ {
		n := 0
		for _, fg := range asg.FG[b*A : (b+1)*A] {
			if fg {
				n++
			}
		}
		m.count[b] = n
		m.pmax = max(m.pmax, n)
	}
	m.anchor = growI32(m.anchor, B*m.pmax)
	m.gt = growI32(m.gt, B*m.pmax)
	for b := 0; b < B; b++ {
		row := m.anchor[b*m.pmax : (b+1)*m.pmax]
		gts := m.gt[b*m.pmax : (b+1)*m.pmax]
		p := 0
		for a := 0; a < A; a++ {
			if asg.FG[b*A+a] {
				row[p], gts[p] = int32(a), asg.GTIdx[b*A+a]
				p++
			}
		}
		for ; p < m.pmax; p++ {
			row[p], gts[p] = -1, -1
		}
	}
}

// loss returns the (ungained) mask loss: per positive, the mean over the
// whole prototype grid of the box-cropped BCE of coef·proto against the
// positive's GT mask, divided by the GT's normalised area; summed per image,
// then over images, then divided by the batch's positive count. When coefG
// (or protoG) is non-nil, scale·dL/dcoef (dL/dproto) is added into it.
func (m *maskScratch) loss(g *Geometry, asg *Assignment, tg *padded, coef, proto, coefG, protoG []float32, scale float64) float64 {
	m.gather(asg)
	B, hw := g.B, g.ProtoH*g.ProtoW
	m.perImg = growF64(m.perImg, B)
	nw := workers(B)
	for len(m.z) < nw {
		m.z = append(m.z, nil)
	}
	for w := range nw {
		if cap(m.z[w]) < hw {
			m.z[w] = make([]float64, hw)
		}
	}
	grad := coefG != nil || protoG != nil
	kGrad := scale / (float64(hw) * float64(asg.NumFG))
	// Images run in parallel: every write below (perImg[b], the
	// coefficients of image b's anchors, image b's prototypes) belongs to
	// one image.
	forEach(B, func(w, b int) {
		z := m.z[w][:hw]
		for row := b * m.pmax; row < (b+1)*m.pmax; row++ {
			m.row(g, asg, tg, coef, proto, coefG, protoG, z, b, row, grad, kGrad)
		}
	})
	total := 0.0
	for _, v := range m.perImg {
		total += v
	}
	return total / float64(asg.NumFG)
}

// row adds the loss of one gathered positive (and its gradient) into
// m.perImg[b], coefG and protoG, using z as scratch.
func (m *maskScratch) row(g *Geometry, asg *Assignment, tg *padded, coef, proto, coefG, protoG []float32, z []float64, b, row int, grad bool, kGrad float64) {
	A, NM, M := asg.A, g.NM, asg.M
	H, W := g.ProtoH, g.ProtoW
	hw := H * W
	imgH, imgW := g.ImageSize()
	a, j := int(m.anchor[row]), int(m.gt[row])
	// Padding rows carry the sentinel -1; used as an index it would read
	// another image's data (or GT slot -1 would match background in the
	// owner map), so they are skipped before any gather.
	if j < 0 || a < 0 {
		return
	}
	box := tg.boxes[(b*M+j)*4 : (b*M+j)*4+4]
	nx1, ny1, nx2, ny2 := box[0]/imgW, box[1]/imgH, box[2]/imgW, box[3]/imgH
	area := float64((nx2 - nx1) * (ny2 - ny1))
	mx1, my1 := nx1*float32(W), ny1*float32(H)
	mx2, my2 := nx2*float32(W), ny2*float32(H)
	var c0, c1, r0, r1 int
	if m.count[b] < cropRoundBelow {
		c0, c1 = int(math.RoundToEven(float64(mx1))), int(math.RoundToEven(float64(mx2)))
		r0, r1 = int(math.RoundToEven(float64(my1))), int(math.RoundToEven(float64(my2)))
	} else {
		// Keep x1 ≤ c < x2 for fractional bounds: first integer ≥ x1,
		// first integer ≥ x2.
		c0, c1 = int(math.Ceil(float64(mx1))), int(math.Ceil(float64(mx2)))
		r0, r1 = int(math.Ceil(float64(my1))), int(math.Ceil(float64(my2)))
	}
	c0, c1 = min(max(c0, 0), W), min(max(c1, 0), W)
	r0, r1 = min(max(r0, 0), H), min(max(r1, 0), H)
	if c0 >= c1 || r0 >= r1 {
		return
	}
	cw := c1 - c0
	zz := z[:(r1-r0)*cw]
	clear(zz)
	for n := 0; n < NM; n++ {
		cn := float64(coef[(b*NM+n)*A+a])
		pr := proto[(b*NM+n)*hw : (b*NM+n+1)*hw]
		for r := r0; r < r1; r++ {
			zr := zz[(r-r0)*cw : (r-r0+1)*cw]
			for c, pv := range pr[r*W+c0 : r*W+c1] {
				zr[c] += cn * float64(pv)
			}
		}
	}
	own := tg.owner[b*hw : (b+1)*hw]
	sum := 0.0
	kp := kGrad / area
	for r := r0; r < r1; r++ {
		for c := c0; c < c1; c++ {
			zi := &zz[(r-r0)*cw+c-c0]
			gtv := 0.0
			if own[r*W+c] == int32(j+1) {
				gtv = 1
			}
			l, p := bceSigmoid(*zi, gtv)
			sum += l
			*zi = kp * (p - gtv) // reuse as dL/dz
		}
	}
	m.perImg[b] += sum / float64(hw) / area
	if !grad {
		return
	}
	for n := 0; n < NM; n++ {
		ci := (b*NM+n)*A + a
		cn := float64(coef[ci])
		pr := proto[(b*NM+n)*hw : (b*NM+n+1)*hw]
		var pg []float32
		if protoG != nil {
			pg = protoG[(b*NM+n)*hw : (b*NM+n+1)*hw]
		}
		dc := 0.0
		for r := r0; r < r1; r++ {
			zr := zz[(r-r0)*cw : (r-r0+1)*cw]
			for c, pv := range pr[r*W+c0 : r*W+c1] {
				dc += zr[c] * float64(pv)
			}
			if pg != nil {
				for c, dz := range zr {
					pg[r*W+c0+c] += float32(dz * cn)
				}
			}
		}
		if coefG != nil {
			coefG[ci] += float32(dc)
		}
	}
}
