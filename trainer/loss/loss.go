package loss

import (
	"errors"
	"fmt"
	"math"
)

// Level is one detection scale: its feature-map size and stride in pixels.
type Level struct {
	H, W   int
	Stride float32
}

// Geometry fixes the shapes of a batch's head outputs.
type Geometry struct {
	// B is the batch size, NC the class count, NM the mask coefficients.
	B, NC, NM int
	// Levels are the detection scales in P3, P4, P5 order; anchors are
	// their cell centres, row-major, concatenated in this order.
	Levels []Level
	// ProtoH×ProtoW is the prototype (and GT mask) grid, SemH×SemW the
	// semantic-logit grid.
	ProtoH, ProtoW int
	SemH, SemW     int
}

// Anchors returns the number of anchor points over all levels.
func (g *Geometry) Anchors() int {
	n := 0
	for _, l := range g.Levels {
		n += l.H * l.W
	}
	return n
}

// ImageSize is the network input size, H and W in pixels: the first
// level's map size times its stride.
func (g *Geometry) ImageSize() (h, w float32) {
	return float32(g.Levels[0].H) * g.Levels[0].Stride, float32(g.Levels[0].W) * g.Levels[0].Stride
}

// anchorGrid writes the anchor centres in grid units, [A, 2], and each
// anchor's stride, [A].
func (g *Geometry) anchorGrid(pts, strides []float32) {
	i := 0
	for _, l := range g.Levels {
		for y := 0; y < l.H; y++ {
			for x := 0; x < l.W; x++ {
				pts[2*i], pts[2*i+1] = float32(x)+0.5, float32(y)+0.5
				strides[i] = l.Stride
				i++
			}
		}
	}
}

func (g *Geometry) check() error {
	if g.B < 0 || g.NC < 1 || g.NM < 1 || len(g.Levels) < 2 || g.ProtoH < 1 || g.ProtoW < 1 || g.SemH < 1 || g.SemW < 1 {
		return fmt.Errorf("loss: bad geometry %+v (need NC, NM ≥ 1, at least two levels, positive map sizes)", *g)
	}
	for i, l := range g.Levels {
		if l.H < 1 || l.W < 1 || !(l.Stride > 0) {
			return fmt.Errorf("loss: level %d: bad size %dx%d or stride %v", i, l.H, l.W, l.Stride)
		}
	}
	return nil
}

// Branch holds one head branch's train outputs, row-major float32. As a
// gradient holder it has the same layout.
type Branch struct {
	// Boxes are raw l, t, r, b distances in grid units, [B, 4, A].
	Boxes []float32
	// Scores are class logits, [B, NC, A].
	Scores []float32
	// Coef are mask coefficients, [B, NM, A].
	Coef []float32
}

// Outputs are the model's train-mode outputs the loss consumes.
type Outputs struct {
	Geometry
	One2Many, One2One Branch
	// Proto are the mask prototypes, [B, NM, ProtoH, ProtoW]. Semseg are
	// the semantic logits, [B, NC, SemH, SemW]. The one-to-one branch sees
	// them detached, so only the one-to-many terms send them gradient.
	Proto, Semseg []float32
}

// Grads receives d(total)/d(output) for every output, same layouts.
type Grads struct {
	One2Many, One2One Branch
	Proto, Semseg     []float32
}

func (o *Outputs) check() error {
	return checkOutputLens(&o.Geometry, [NumOutputs]int{len(o.One2Many.Boxes), len(o.One2Many.Scores), len(o.One2Many.Coef),
		len(o.One2One.Boxes), len(o.One2One.Scores), len(o.One2One.Coef), len(o.Proto), len(o.Semseg)})
}

// checkOutputLens checks the geometry and the lengths of the head
// outputs, in the NumOutputs order, against it.
func checkOutputLens(g *Geometry, n [NumOutputs]int) error {
	if err := g.check(); err != nil {
		return err
	}
	A := g.Anchors()
	for i, name := range [2]string{"one2many", "one2one"} {
		if n[3*i] != g.B*4*A || n[3*i+1] != g.B*g.NC*A || n[3*i+2] != g.B*g.NM*A {
			return fmt.Errorf("loss: %s outputs have %d/%d/%d values, want B×4×A=%d, B×NC×A=%d, B×NM×A=%d",
				name, n[3*i], n[3*i+1], n[3*i+2], g.B*4*A, g.B*g.NC*A, g.B*g.NM*A)
		}
	}
	if n[6] != g.B*g.NM*g.ProtoH*g.ProtoW || n[7] != g.B*g.NC*g.SemH*g.SemW {
		return fmt.Errorf("loss: proto/semseg have %d/%d values, want %d/%d", n[6], n[7],
			g.B*g.NM*g.ProtoH*g.ProtoW, g.B*g.NC*g.SemH*g.SemW)
	}
	return nil
}

// Grads allocates a gradient holder shaped like o.
func (o *Outputs) Grads() *Grads {
	return &Grads{
		One2Many: Branch{make([]float32, len(o.One2Many.Boxes)), make([]float32, len(o.One2Many.Scores)), make([]float32, len(o.One2Many.Coef))},
		One2One:  Branch{make([]float32, len(o.One2One.Boxes)), make([]float32, len(o.One2One.Scores)), make([]float32, len(o.One2One.Coef))},
		Proto:    make([]float32, len(o.Proto)),
		Semseg:   make([]float32, len(o.Semseg)),
	}
}

var errGradShapes = errors.New("loss: gradient buffers do not match the outputs' shapes")

func (gr *Grads) check(o *Outputs) error {
	if len(gr.One2Many.Boxes) != len(o.One2Many.Boxes) || len(gr.One2Many.Scores) != len(o.One2Many.Scores) ||
		len(gr.One2Many.Coef) != len(o.One2Many.Coef) || len(gr.One2One.Boxes) != len(o.One2One.Boxes) ||
		len(gr.One2One.Scores) != len(o.One2One.Scores) || len(gr.One2One.Coef) != len(o.One2One.Coef) ||
		len(gr.Proto) != len(o.Proto) || len(gr.Semseg) != len(o.Semseg) {
		return errGradShapes
	}
	return nil
}

// Component indexes the loss vector [box, seg, cls, dfl, semseg].
const (
	Box = iota
	Seg
	Cls
	DFL
	Semseg
	NumComponents
)

// ComponentNames are the loss vector's entries in order, as the reference logs them.
var ComponentNames = [NumComponents]string{"box", "seg", "cls", "dfl", "semseg"}

// Config sets the criterion's hyperparameters. DefaultConfig gives the
// reference's values.
type Config struct {
	// BoxGain, ClsGain and DFLGain weight the loss vector; both mask terms
	// reuse BoxGain, as the reference does.
	BoxGain, ClsGain, DFLGain float64
	// One2Many and One2One are the two branches' assigner settings.
	One2Many, One2One AssignerConfig
	// Epochs and the O2M start/end weights define the ProgLoss schedule.
	Epochs           int
	O2MStart, O2MEnd float64
}

// DefaultConfig returns the reference's settings for a run of epochs epochs.
func DefaultConfig(epochs int) Config {
	return Config{
		BoxGain: 7.5, ClsGain: 0.5, DFLGain: 1.5,
		One2Many: One2ManyAssigner(), One2One: One2OneAssigner(),
		Epochs: epochs, O2MStart: 0.8, O2MEnd: 0.1,
	}
}

// Result is one batch's loss.
type Result struct {
	// One2Many and One2One are each branch's vector times the batch size.
	One2Many, One2One [NumComponents]float64
	// Combined is o2m·One2Many + o2o·One2One; Total is its sum, the scalar
	// that is backpropagated.
	Combined [NumComponents]float64
	Total    float64
	// Items are the logged loss items: the one-to-one vector, not times B.
	Items [NumComponents]float64
	// O2M and O2O are the branch weights used.
	O2M, O2O float64
	// NumFG counts positives and ScoreSum sums the target scores, per branch.
	NumFG    [2]int
	ScoreSum [2]float64
}

// Criterion is the end-to-end segmentation loss over both head branches,
// with its ProgLoss state. It owns reusable buffers and is not safe for
// concurrent use.
type Criterion struct {
	cfg      Config
	updates  int
	o2m, o2o float64
	asg      [2]*Assigner
	tg       padded
	noCrowd  Targets
	br       branchScratch
	last     [2]*Assignment
	semVal   float64
	semDone  bool
	// dev, roundTrips and twin serve ForwardOn.
	dev        deviceScratch
	roundTrips int
	twin       twinScratch
}

// NewCriterion checks cfg and returns a criterion at epoch 0.
func NewCriterion(cfg Config) (*Criterion, error) {
	if cfg.Epochs < 1 {
		return nil, fmt.Errorf("loss: epochs %d < 1", cfg.Epochs)
	}
	c := &Criterion{cfg: cfg}
	var err error
	if c.asg[0], err = NewAssigner(cfg.One2Many); err != nil {
		return nil, fmt.Errorf("one2many: %w", err)
	}
	if c.asg[1], err = NewAssigner(cfg.One2One); err != nil {
		return nil, fmt.Errorf("one2one: %w", err)
	}
	c.setWeights()
	return c, nil
}

func (c *Criterion) setWeights() {
	d := 1 - float64(c.updates)/float64(max(c.cfg.Epochs-1, 1))
	c.o2m = max(d, 0)*(c.cfg.O2MStart-c.cfg.O2MEnd) + c.cfg.O2MEnd
	c.o2o = max(1-c.o2m, 0)
}

// Update advances the ProgLoss schedule; call it once at the end of every
// epoch, after its last batch.
func (c *Criterion) Update() { c.updates++; c.setWeights() }

// SetUpdates sets how many epochs have ended, e.g. on resume.
func (c *Criterion) SetUpdates(u int) { c.updates = u; c.setWeights() }

// Weights returns the current one-to-many and one-to-one weights.
func (c *Criterion) Weights() (o2m, o2o float64) { return c.o2m, c.o2o }

// Assignments returns the last call's assignments (one-to-many, one-to-one).
// They alias the criterion's buffers until its next call. After a
// ForwardOn that ran on a device twin they are nil: that assignment stays
// in the backend's memory.
func (c *Criterion) Assignments() (o2m, o2o *Assignment) { return c.last[0], c.last[1] }

// Forward computes the loss of out against t. When grads is non-nil it is
// overwritten with d(Total)/d(output) for every output.
func (c *Criterion) Forward(out *Outputs, t *Targets, grads *Grads) (Result, error) {
	var res Result
	if err := out.check(); err != nil {
		return res, err
	}
	if err := checkTargets(t, &out.Geometry); err != nil {
		return res, err
	}
	t = withoutCrowd(t, &c.noCrowd, out.ProtoH*out.ProtoW)
	if grads != nil {
		if err := grads.check(out); err != nil {
			return res, err
		}
		for _, s := range [][]float32{grads.One2Many.Boxes, grads.One2Many.Scores, grads.One2Many.Coef,
			grads.One2One.Boxes, grads.One2One.Scores, grads.One2One.Coef, grads.Proto, grads.Semseg} {
			clear(s)
		}
	}
	c.tg.build(t, &out.Geometry)
	c.semDone = false
	var terms [2]branchTerms
	for i, w := range [2]float64{c.o2m, c.o2o} {
		br, bg := &out.One2Many, (*Branch)(nil)
		var protoG, semG []float32
		if grads != nil {
			bg, protoG, semG = &grads.One2Many, grads.Proto, grads.Semseg
		}
		if i == 1 {
			br = &out.One2One
			if grads != nil {
				// Prototypes and semantic logits are detached in one2one.
				bg, protoG, semG = &grads.One2One, nil, nil
			}
		}
		bt, asg, err := c.branch(i, out, br, bg, protoG, semG, w*float64(out.B))
		if err != nil {
			return res, err
		}
		c.last[i] = asg
		terms[i] = bt
	}
	return c.cfg.combine(terms, c.semVal, c.o2m, c.o2o, out.B), nil
}

// branchTerms are one branch's ungained loss sums, from which vector
// forms its loss vector: Σ BCE, Σ (1−CIoU)·w and Σ L1/4·w over the
// positives (w their target score), the mask term, and the assignment's
// positive count and target-score sum.
type branchTerms struct {
	cls, box, dist, seg float64
	numFG               int
	scoreSum            float64
}

// vector is one branch's gained loss vector (not times B); semVal is the
// batch's semantic term. A branch without positives has only its class
// term, as the reference returns before the others.
func (cfg *Config) vector(t branchTerms, semVal float64) [NumComponents]float64 {
	var v [NumComponents]float64
	S := max(t.scoreSum, 1)
	v[Cls] = cfg.ClsGain * t.cls / S
	if t.numFG == 0 {
		return v
	}
	v[Box] = cfg.BoxGain * t.box / S
	v[DFL] = cfg.DFLGain * t.dist / S
	v[Seg] = cfg.BoxGain * t.seg
	v[Semseg] = cfg.BoxGain * semVal
	return v
}

// combine forms a batch's Result from both branches' terms, the branch
// weights and the batch size.
func (cfg *Config) combine(terms [2]branchTerms, semVal, o2m, o2o float64, B int) Result {
	res := Result{O2M: o2m, O2O: o2o}
	b := float64(B)
	for i, t := range terms {
		v := cfg.vector(t, semVal)
		res.NumFG[i], res.ScoreSum[i] = t.numFG, t.scoreSum
		for k := range v {
			if i == 0 {
				res.One2Many[k] = v[k] * b
			} else {
				res.One2One[k] = v[k] * b
				res.Items[k] = v[k]
			}
		}
	}
	for k := range res.Combined {
		res.Combined[k] = o2m*res.One2Many[k] + o2o*res.One2One[k]
		res.Total += res.Combined[k]
	}
	return res
}

// branchScratch holds one branch's per-batch buffers.
type branchScratch struct {
	anchors, strides []float32 // grid units [A,2], [A]
	anchorsPx        []float32 // [A,2]
	pdPx             []float32 // [B,A,4]
	probs            []float32 // [B,NC,A]
	clsPart          []float64 // per (image, class) BCE sums
	mask             maskScratch
	sem              semScratch
}

// prepare decodes a branch's raw outputs for the assigner and the class
// term: anchor centres and strides, predicted boxes in pixels, class
// probabilities and each (image, class) row's BCE sum at target 0.
func (s *branchScratch) prepare(g *Geometry, br *Branch) {
	B, A, NC := g.B, g.Anchors(), g.NC
	s.anchors = growF32(s.anchors, 2*A)
	s.strides = growF32(s.strides, A)
	s.anchorsPx = growF32(s.anchorsPx, 2*A)
	s.pdPx = growF32(s.pdPx, B*A*4)
	s.probs = growF32(s.probs, B*NC*A)
	g.anchorGrid(s.anchors, s.strides)
	for a := 0; a < A; a++ {
		s.anchorsPx[2*a] = s.anchors[2*a] * s.strides[a]
		s.anchorsPx[2*a+1] = s.anchors[2*a+1] * s.strides[a]
	}
	for b := 0; b < B; b++ {
		for a := 0; a < A; a++ {
			ax, ay, st := s.anchors[2*a], s.anchors[2*a+1], s.strides[a]
			l, tp := br.Boxes[(b*4+0)*A+a], br.Boxes[(b*4+1)*A+a]
			r, bt := br.Boxes[(b*4+2)*A+a], br.Boxes[(b*4+3)*A+a]
			p := s.pdPx[(b*A+a)*4:]
			p[0], p[1], p[2], p[3] = (ax-l)*st, (ay-tp)*st, (ax+r)*st, (ay+bt)*st
		}
	}
	// One exponential per logit serves both the assigner's probabilities
	// and the class loss: BCE(x, t) = softplus(x) − x·t, and the target t
	// is non-zero only on a positive's label channel, so each (image,
	// class) row's softplus sum is formed here and its positives' x·t
	// subtracted once the assignment is known.
	s.clsPart = growF64(s.clsPart, B*NC)
	forEach(B*NC, func(_, bk int) {
		row := bk * A
		sum := 0.0
		for i, x := range br.Scores[row : row+A] {
			l, p := bceSigmoid(float64(x), 0)
			sum += l
			s.probs[row+i] = float32(p)
		}
		s.clsPart[bk] = sum
	})
}

// assignInput is the assigner's view of a prepared branch and the padded
// targets.
func (s *branchScratch) assignInput(g *Geometry, tg *padded) *AssignInput {
	return &AssignInput{
		B: g.B, A: g.Anchors(), NC: g.NC, M: tg.M,
		PdScores: s.probs, PdBoxes: s.pdPx, Anchors: s.anchorsPx,
		GTLabels: tg.labels, GTBoxes: tg.boxes, MaskGT: tg.valid,
	}
}

// scoreSum is Σ target scores over the batch's positives.
func scoreSum(asg *Assignment) float64 {
	sum := 0.0
	for i, fg := range asg.FG {
		if fg {
			sum += float64(asg.ScoreValue[i])
		}
	}
	return sum
}

// clsBox returns a prepared branch's class, box (CIoU) and distance sums
// against asg (ungained, un-normalised) and, when bg is non-nil, adds
// scale·gain/S times their gradients into bg.Scores and bg.Boxes, S =
// max(Σ target scores, 1).
func (s *branchScratch) clsBox(g *Geometry, cfg *Config, br *Branch, asg *Assignment, scale float64, bg *Branch) (cls, box, dist float64) {
	B, A, NC := g.B, g.Anchors(), g.NC
	S := max(scoreSum(asg), 1)

	// Classification: BCE over every (image, class, anchor), target score
	// only on the positive's label channel; d/dx = sigmoid(x) − t.
	gc := scale * cfg.ClsGain / S
	forEach(B*NC, func(_, bk int) {
		b, k := bk/NC, bk%NC
		row := bk * A
		pos := 0.0
		for a := 0; a < A; a++ {
			tv := 0.0
			if ba := b*A + a; asg.FG[ba] && int(asg.Labels[ba]) == k {
				tv = float64(asg.ScoreValue[ba])
				pos += float64(br.Scores[row+a]) * tv
			}
			if bg != nil {
				bg.Scores[row+a] += float32(gc * (float64(s.probs[row+a]) - tv))
			}
		}
		s.clsPart[bk] -= pos
	})
	for _, v := range s.clsPart {
		cls += v
	}
	if asg.NumFG == 0 {
		return cls, 0, 0
	}

	// Box (CIoU) and the reg_max=1 distance term, on grid-unit boxes.
	imgH, imgW := g.ImageSize()
	gBox := scale * cfg.BoxGain / S
	gDist := scale * cfg.DFLGain / S
	norms := [4]float64{float64(imgW), float64(imgH), float64(imgW), float64(imgH)}
	for b := 0; b < B; b++ {
		for a := 0; a < A; a++ {
			ba := b*A + a
			if !asg.FG[ba] {
				continue
			}
			w := float64(asg.ScoreValue[ba])
			st := s.strides[a]
			ax, ay := float64(s.anchors[2*a]), float64(s.anchors[2*a+1])
			var raw, tgt [4]float64
			for j := 0; j < 4; j++ {
				raw[j] = float64(br.Boxes[(b*4+j)*A+a])
				tgt[j] = float64(asg.Boxes[ba*4+j] / st)
			}
			pred := [4]float64{ax - raw[0], ay - raw[1], ax + raw[2], ay + raw[3]}
			ci, cs := ciou(pred, tgt)
			box += (1 - ci) * w
			tDist := [4]float64{ax - tgt[0], ay - tgt[1], tgt[2] - ax, tgt[3] - ay}
			l1 := 0.0
			var sign [4]float64
			for j := 0; j < 4; j++ {
				d := (raw[j] - tDist[j]) * float64(st) / norms[j]
				l1 += math.Abs(d)
				if d > 0 {
					sign[j] = 1
				} else if d < 0 {
					sign[j] = -1
				}
			}
			dist += l1 / 4 * w
			if bg != nil {
				gp := cs.grad(-gBox * w) // d/d pred xyxy
				dRaw := [4]float64{-gp[0], -gp[1], gp[2], gp[3]}
				for j := 0; j < 4; j++ {
					dRaw[j] += gDist * w / 4 * sign[j] * float64(st) / norms[j]
					bg.Boxes[(b*4+j)*A+a] += float32(dRaw[j])
				}
			}
		}
	}
	return cls, box, dist
}

// branch computes one branch's ungained terms and, when bg is non-nil,
// adds scale·d(vector sum)/d(output) into bg, protoG and semG (nil means
// detached).
func (c *Criterion) branch(which int, out *Outputs, br *Branch, bg *Branch, protoG, semG []float32, scale float64) (branchTerms, *Assignment, error) {
	var t branchTerms
	g := &out.Geometry
	s := &c.br
	s.prepare(g, br)
	tg := &c.tg
	asg, err := c.asg[which].Assign(s.assignInput(g, tg))
	if err != nil {
		return t, nil, fmt.Errorf("loss: %s assignment: %w", [2]string{"one2many", "one2one"}[which], err)
	}
	t.numFG, t.scoreSum = asg.NumFG, scoreSum(asg)
	t.cls, t.box, t.dist = s.clsBox(g, &c.cfg, br, asg, scale, bg)
	if asg.NumFG == 0 {
		return t, asg, nil
	}
	var coefG []float32
	if bg != nil {
		coefG = bg.Coef
	}
	t.seg = s.mask.loss(g, asg, tg, br.Coef, out.Proto, coefG, protoG, scale*c.cfg.BoxGain)
	// Both branches read the same logits and target, so the value is
	// computed once per batch; only the first (one2many) caller sends
	// gradient, the one2one copy being detached.
	if !c.semDone || semG != nil {
		c.semVal = s.sem.loss(g, out.Semseg, tg.sem, semG, scale*c.cfg.BoxGain)
		c.semDone = true
	}
	return t, asg, nil
}

// bceSigmoid returns BCE-with-logits and the sigmoid of x from one
// exponential.
func bceSigmoid(x, t float64) (loss, p float64) {
	e := math.Exp(-math.Abs(x))
	// log(1+e) rather than log1p(e): e ≤ 1, and where 1+e rounds the term
	// is below 1e-16 in absolute value, far under the sums' float32 target,
	// while math.Log has an assembly kernel and Log1p does not.
	loss = max(x, 0) - x*t + math.Log(1+e)
	if x >= 0 {
		return loss, 1 / (1 + e)
	}
	return loss, e / (1 + e)
}

// bceLogits is BCE-with-logits in its stable form.
func bceLogits(x, t float64) float64 {
	return max(x, 0) - x*t + math.Log1p(math.Exp(-math.Abs(x)))
}
