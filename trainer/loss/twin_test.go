package loss

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// goTwin is a backend with the loss's device twins (DeviceKernels) and
// no host kernels: each method is written in the device layouts over the
// emulated device's memory with the Go functions Forward runs, so that
// ForwardOn's device path — its checks, scratch, sequencing and the
// layouts between the kernels — is checked end to end against Forward
// where no GPU is, and must match it bit for bit.
type goTwin struct {
	backend.Backend
	host  backend.HostKernels
	calls []string
}

func newGoTwin() *goTwin {
	e := cpu.NewEmulated()
	return &goTwin{Backend: e, host: e}
}

var _ DeviceKernels = (*goTwin)(nil)

func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// paddedOf reads a DevicePadded as the host's padded (labels, boxes,
// valid and, when given, the owner map).
func paddedOf(v backend.View, p *DevicePadded, owner backend.Buffer) *padded {
	tg := &padded{M: p.M, labels: v.Int32(p.Labels), boxes: v.Float32(p.Boxes)}
	for _, x := range v.Int32(p.Valid) {
		tg.valid = append(tg.valid, x != 0)
	}
	if owner.Present() {
		tg.owner = v.Int32(owner)
	}
	return tg
}

// assignmentOf reads a DeviceAssignment as an Assignment.
func assignmentOf(v backend.View, g *Geometry, M int, a *DeviceAssignment) *Assignment {
	r := &Assignment{B: g.B, A: g.Anchors(), M: M, GTIdx: v.Int32(a.GTIdx), Labels: v.Int32(a.Labels),
		Boxes: v.Float32(a.Boxes), ScoreValue: v.Float32(a.ScoreValue), NumFG: int(v.Int32(a.NumFG)[0])}
	for _, x := range v.Int32(a.FG) {
		r.FG = append(r.FG, x != 0)
	}
	return r
}

func (d *goTwin) LossTargets(g Geometry, t *DeviceTargets, p *DevicePadded) {
	d.calls = append(d.calls, "targets")
	d.host.RunHost(func(v backend.View) {
		bpi, cls, boxes := v.Int32(t.BoxesPerImage), v.Int32(t.Classes), v.Float32(t.Boxes)
		crowd := v.Bytes(t.IsCrowd)[:t.CrowdBytes]
		labels, pb, valid, src, count := v.Int32(p.Labels), v.Float32(p.Boxes), v.Int32(p.Valid), v.Int32(p.Src), v.Int32(p.Count)
		clear(labels)
		clear(pb)
		clear(valid)
		for i := range src {
			src[i] = -1
		}
		k := 0
		for b, n := range bpi {
			j := 0
			for range n {
				if len(crowd) == 0 || crowd[k] == 0 {
					s := b*p.M + j
					labels[s], src[s] = cls[k], int32(k)
					copy(pb[4*s:4*s+4], boxes[4*k:4*k+4])
					x := boxes[4*k : 4*k+4]
					valid[s] = b2i(x[0]+x[1]+x[2]+x[3] > 0)
					j++
				}
				k++
			}
			count[b] = int32(j)
		}
	})
}

func (d *goTwin) LossOwners(g Geometry, t *DeviceTargets, p *DevicePadded, owner, sem backend.Buffer) {
	d.calls = append(d.calls, "owners")
	d.host.RunHost(func(v backend.View) {
		var h deviceScratch
		tg := h.targets(v.Int32(t.BoxesPerImage), v.Int32(t.Classes), v.Float32(t.Boxes),
			v.Bytes(t.IsCrowd)[:t.CrowdBytes], v.Bytes(t.Masks)[:t.MaskBytes])
		var kept Targets
		tg = withoutCrowd(tg, &kept, g.ProtoH*g.ProtoW)
		var pd padded
		pd.build(tg, &g)
		copy(v.Int32(owner), pd.owner)
		copy(v.Float32(sem), pd.sem)
	})
}

func (d *goTwin) LossAssign(g Geometry, cfg AssignerConfig, boxes, scores backend.Buffer, p *DevicePadded, a *DeviceAssignment) {
	d.calls = append(d.calls, "assign")
	d.host.RunHost(func(v backend.View) {
		var s branchScratch
		s.prepare(&g, &Branch{Boxes: v.Float32(boxes), Scores: v.Float32(scores)})
		as, err := NewAssigner(cfg)
		if err != nil {
			panic(err)
		}
		r, err := as.Assign(s.assignInput(&g, paddedOf(v, p, backend.Buffer{})))
		if err != nil {
			panic(err)
		}
		fg := v.Int32(a.FG)
		for i, x := range r.FG {
			fg[i] = b2i(x)
		}
		copy(v.Int32(a.GTIdx), r.GTIdx)
		copy(v.Int32(a.Labels), r.Labels)
		copy(v.Float32(a.Boxes), r.Boxes)
		copy(v.Float32(a.ScoreValue), r.ScoreValue)
		v.Int32(a.NumFG)[0] = int32(r.NumFG)
		putFloat64(v.Float32(a.ScoreSum), scoreSum(r))
	})
}

func (d *goTwin) LossClsBox(g Geometry, cfg Config, boxes, scores backend.Buffer, a *DeviceAssignment, scale float64, boxesG, scoresG, terms backend.Buffer) {
	d.calls = append(d.calls, "clsbox")
	d.host.RunHost(func(v backend.View) {
		var s branchScratch
		br := &Branch{Boxes: v.Float32(boxes), Scores: v.Float32(scores)}
		s.prepare(&g, br)
		var bg *Branch
		if boxesG.Present() {
			bg = &Branch{Boxes: v.Float32(boxesG), Scores: v.Float32(scoresG)}
		}
		cls, box, dist := s.clsBox(&g, &cfg, br, assignmentOf(v, &g, 0, a), scale, bg)
		w := v.Float32(terms)
		putFloat64(w[0:], cls)
		putFloat64(w[2:], box)
		putFloat64(w[4:], dist)
	})
}

func (d *goTwin) LossMask(g Geometry, a *DeviceAssignment, p *DevicePadded, owner, coef, proto backend.Buffer, scale float64, coefG, protoG, terms backend.Buffer) {
	d.calls = append(d.calls, "mask")
	d.host.RunHost(func(v backend.View) {
		asg := assignmentOf(v, &g, p.M, a)
		val := 0.0
		if asg.NumFG > 0 {
			var m maskScratch
			val = m.loss(&g, asg, paddedOf(v, p, owner), v.Float32(coef), v.Float32(proto), v.Float32(coefG), v.Float32(protoG), scale)
		}
		putFloat64(v.Float32(terms), val)
	})
}

func (d *goTwin) LossSemseg(g Geometry, logits, sem backend.Buffer, scale float64, grad, terms backend.Buffer) {
	d.calls = append(d.calls, "semseg")
	d.host.RunHost(func(v backend.View) {
		var s semScratch
		putFloat64(v.Float32(terms), s.loss(&g, v.Float32(logits), v.Float32(sem), v.Float32(grad), scale))
	})
}

func (d *goTwin) LossCombine(g Geometry, cfg Config, o2m, o2o float64, terms backend.Buffer, a [2]*DeviceAssignment, semG, res backend.Buffer) {
	d.calls = append(d.calls, "combine")
	d.host.RunHost(func(v backend.View) {
		w := v.Float32(terms)
		var bt [2]branchTerms
		for i := range bt {
			o := termsBranch * i
			bt[i] = branchTerms{cls: getFloat64(w[o:]), box: getFloat64(w[o+2:]), dist: getFloat64(w[o+4:]),
				seg: getFloat64(w[o+6:]), numFG: int(v.Int32(a[i].NumFG)[0]), scoreSum: getFloat64(v.Float32(a[i].ScoreSum))}
		}
		r := cfg.combine(bt, getFloat64(w[2*termsBranch:]), o2m, o2o, g.B)
		if bt[0].numFG == 0 {
			clear(v.Float32(semG))
		}
		putResult(v.Float32(res), &r)
	})
}

func (d *goTwin) Name() string { return "twin" }

// TestForwardOnTwinSequence holds the order ForwardOn launches the twins
// in (device.go's), the kernels a batch without instances skips, and a
// batch whose only instances are invalid slots (coordinates summing to
// ≤ 0: M > 0, no positive), where Forward sends the semantic term no
// gradient and LossCombine must zero the one LossSemseg added.
func TestForwardOnTwinSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	out, tg := randomCase(rng, []int{2, 3})
	_, none := randomCase(rng, []int{0, 0})
	_, invalid := randomCase(rng, []int{1, 0})
	copy(invalid.Boxes, []float32{-20, -20, -10, -10})
	full := []string{"targets", "owners", "assign", "clsbox", "mask", "assign", "clsbox", "mask", "semseg", "combine"}
	for _, c := range []struct {
		name  string
		tg    *Targets
		calls []string
	}{
		{"instances", tg, full},
		{"none", none, []string{"targets", "assign", "clsbox", "assign", "clsbox", "combine"}},
		{"invalid", invalid, full},
	} {
		t.Run(c.name, func(t *testing.T) {
			be := newGoTwin()
			d := newOnBackend(be, out)
			ref, _ := NewCriterion(DefaultConfig(10))
			crit, _ := NewCriterion(DefaultConfig(10))
			want := out.Grads()
			wres, err := ref.Forward(out, c.tg, want)
			if err != nil {
				t.Fatal(err)
			}
			items, total, got, err := d.run(crit, out.Geometry, c.tg, true)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(be.calls, c.calls) {
				t.Errorf("calls %v, want %v", be.calls, c.calls)
			}
			if items != wres.Items || math.Float64bits(total) != math.Float64bits(wres.Total) {
				t.Errorf("items %v total %v, want %v %v", items, total, wres.Items, wres.Total)
			}
			for i, ws := range gradSlices(want) {
				if j := sameBits(gradSlices(got)[i], ws); j >= 0 {
					t.Errorf("gradient %d differs at %d", i, j)
				}
			}
			if a, b := crit.Assignments(); a != nil || b != nil {
				t.Error("Assignments after a device-twin ForwardOn are not nil")
			}
			if c.name == "invalid" && (wres.NumFG != [2]int{} || slices.ContainsFunc(want.Semseg, func(v float32) bool { return v != 0 })) {
				t.Errorf("the invalid-slot case has positives %v or a semantic gradient: it tests nothing", wres.NumFG)
			}
		})
	}
}

// TestForwardOnTwinRefusesUnrecordedTargets: the twin path checks the
// batch from Upload's record, so targets filled otherwise, or changed
// since, are refused before any launch.
func TestForwardOnTwinRefusesUnrecordedTargets(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	out, tg := randomCase(rng, []int{2, 1})
	be := newGoTwin()
	d := newOnBackend(be, out)
	d.tg.Upload(be, tg)
	c, _ := NewCriterion(DefaultConfig(10))
	bare := DeviceTargets{BoxesPerImage: d.tg.BoxesPerImage, Classes: d.tg.Classes, Boxes: d.tg.Boxes,
		IsCrowd: d.tg.IsCrowd, Masks: d.tg.Masks, CrowdBytes: d.tg.CrowdBytes, MaskBytes: d.tg.MaskBytes}
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, d.grads, &bare, d.res); err == nil || !strings.Contains(err.Error(), "Upload") {
		t.Errorf("targets not uploaded through Upload: %v", err)
	}
	changed := d.tg
	changed.Classes = changed.Classes.Slice(0, 1)
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, d.grads, &changed, d.res); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("targets changed since Upload: %v", err)
	}
	bad := *tg
	bad.Boxes = slices.Clone(tg.Boxes)
	bad.Boxes[2] = bad.Boxes[0] // empty box
	d.tg.Upload(be, &bad)
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, d.grads, &d.tg, d.res); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty box: %v", err)
	}
	if len(be.calls) != 0 {
		t.Errorf("refused batches launched %v", be.calls)
	}
}
