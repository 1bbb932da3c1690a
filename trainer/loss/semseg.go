package loss

// semScratch keeps per-worker sigmoid buffers and per-channel partial sums.
type semScratch struct {
	p         [][]float64
	bce, dice []float64
}

// loss returns 0.5·BCE(mean over all elements) + 0.5·Dice(mean over image
// and channel, smoothing 1) of the semantic logits against target, both
// [B, NC, SemH, SemW]. When grad is non-nil, scale·dL/dlogit is added.
// Channels run in parallel; partial sums are reduced in channel order.
func (s *semScratch) loss(g *Geometry, logits, target, grad []float32, scale float64) float64 {
	B, NC, hw := g.B, g.NC, g.SemH*g.SemW
	n := float64(len(logits))
	nch := float64(B * NC)
	nw := workers(B * NC)
	for len(s.p) < nw {
		s.p = append(s.p, nil)
	}
	for w := range nw {
		s.p[w] = growF64(s.p[w], hw)
	}
	s.bce = growF64(s.bce, B*NC)
	s.dice = growF64(s.dice, B*NC)
	forEach(B*NC, func(w, ch int) {
		pb := s.p[w]
		x := logits[ch*hw : (ch+1)*hw]
		t := target[ch*hw : (ch+1)*hw]
		bce, inter, sp, st := 0.0, 0.0, 0.0, 0.0
		for i := range x {
			tv := float64(t[i])
			l, p := bceSigmoid(float64(x[i]), tv)
			pb[i] = p
			bce += l
			inter += p * tv
			sp += p
			st += tv
		}
		u := sp + st + 1
		num := 2*inter + 1
		s.bce[ch], s.dice[ch] = bce, 1-num/u
		if grad == nil {
			return
		}
		gr := grad[ch*hw : (ch+1)*hw]
		for i, p := range pb {
			tv := float64(t[i])
			// d(1 - num/u)/dp = -(2t·u - num)/u².
			dDice := -(2*tv*u - num) / (u * u)
			d := 0.5*(p-tv)/n + 0.5*dDice/nch*p*(1-p)
			gr[i] += float32(scale * d)
		}
	})
	bce, dice := 0.0, 0.0
	for ch := range s.bce {
		bce += s.bce[ch]
		dice += s.dice[ch]
	}
	return 0.5*bce/n + 0.5*dice/nch
}
