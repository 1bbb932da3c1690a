package loss

// semScratch keeps one channel's sigmoids between the forward and the
// backward pass.
type semScratch struct{ p []float64 }

// loss returns 0.5·BCE(mean over all elements) + 0.5·Dice(mean over image
// and channel, smoothing 1) of the semantic logits against target, both
// [B, NC, SemH, SemW]. When grad is non-nil, scale·dL/dlogit is added.
func (s *semScratch) loss(g *Geometry, logits, target, grad []float32, scale float64) float64 {
	B, NC, hw := g.B, g.NC, g.SemH*g.SemW
	n := float64(len(logits))
	nch := float64(B * NC)
	s.p = growF64(s.p, hw)
	bce, dice := 0.0, 0.0
	for ch := 0; ch < B*NC; ch++ {
		x := logits[ch*hw : (ch+1)*hw]
		t := target[ch*hw : (ch+1)*hw]
		inter, sp, st := 0.0, 0.0, 0.0
		for i := range x {
			tv := float64(t[i])
			l, p := bceSigmoid(float64(x[i]), tv)
			s.p[i] = p
			bce += l
			inter += p * tv
			sp += p
			st += tv
		}
		u := sp + st + 1
		num := 2*inter + 1
		dice += 1 - num/u
		if grad == nil {
			continue
		}
		gr := grad[ch*hw : (ch+1)*hw]
		for i, p := range s.p {
			tv := float64(t[i])
			// d(1 - num/u)/dp = -(2t·u - num)/u².
			dDice := -(2*tv*u - num) / (u * u)
			d := 0.5*(p-tv)/n + 0.5*dDice/nch*p*(1-p)
			gr[i] += float32(scale * d)
		}
	}
	return 0.5*bce/n + 0.5*dice/nch
}
