package loss

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/internal/testenv/shared"
	"github.com/segpipe/segpipe/trainer/loss/internal/lossgolden"
)

// goldenDir locates goldens/loss: ../shared's, or the module's copy
// (internal/testenv/shared) on a clone alone.
func goldenDir(t testing.TB) string {
	t.Helper()
	return shared.Path(t, "goldens/loss")
}

type goldenFile struct {
	t testing.TB
	f *safetensors.File
}

func openGolden(t testing.TB, dir, name string) goldenFile {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return goldenFile{t, f}
}

func (g goldenFile) f32(name string) []float32 {
	g.t.Helper()
	v, _, err := g.f.Float32s(name)
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	return v
}

func (g goldenFile) i64(name string) []int64 {
	g.t.Helper()
	tn, err := g.f.Get(name)
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	v, err := tn.Int64s()
	if err != nil {
		g.t.Fatalf("%s: %v", name, err)
	}
	return v
}

// fromGolden is the goldens' case in this package's types; the
// one-to-one outputs are their own copy of the one-to-many ones.
func fromGolden(c *lossgolden.Case) (*Outputs, *Targets) {
	g := Geometry{B: c.B, NC: c.NC, NM: c.NM, ProtoH: c.ProtoH, ProtoW: c.ProtoW, SemH: c.SemH, SemW: c.SemW}
	for _, l := range c.Levels {
		g.Levels = append(g.Levels, Level{H: l.H, W: l.W, Stride: l.Stride})
	}
	out := &Outputs{Geometry: g, Proto: c.Proto, Semseg: c.Semseg,
		One2Many: Branch{Boxes: c.Boxes, Scores: c.Scores, Coef: c.Coef},
		One2One:  Branch{Boxes: slices.Clone(c.Boxes), Scores: slices.Clone(c.Scores), Coef: slices.Clone(c.Coef)}}
	tg := &Targets{BoxesPerImage: c.BoxesPerImage, Classes: c.Classes, Boxes: c.TargetBoxes, Masks: c.Masks}
	return out, tg
}

// goldenCase loads the golden batch in the loader's layout and the train
// outputs (lossgolden.Read), checking that the masks, composed by the
// loss's rule, give the golden overlap map.
func goldenCase(t testing.TB) (*Outputs, *Targets, string) {
	dir := goldenDir(t)
	c, err := lossgolden.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, tg := fromGolden(c)
	overlap := c.Overlap
	g := out.Geometry
	hw := g.ProtoH * g.ProtoW
	var p padded
	p.build(tg, &g)
	for i, v := range overlap {
		if p.owner[i] != int32(v) {
			t.Fatalf("owner map differs from the golden overlap map at image %d cell %d: %d, want %d", i/hw, i%hw, p.owner[i], v)
		}
	}
	return out, tg, dir
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

// compareAssignment checks an assignment against one branch of
// assigner.safetensors: discrete outputs exactly, metric values to rel 1e-4.
func compareAssignment(t *testing.T, af goldenFile, prefix string, r *Assignment) {
	t.Helper()
	boolEq := func(name string, got []bool) {
		want := af.f32(prefix + name)
		if len(want) != len(got) {
			t.Fatalf("%s%s: %d values, want %d", prefix, name, len(got), len(want))
		}
		bad := 0
		for i := range want {
			if (want[i] != 0) != got[i] {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s%s: %d of %d entries differ", prefix, name, bad, len(want))
		}
	}
	boolEq("mask_in_gts", r.MaskInGTs)
	boolEq("mask_pos_topk", r.MaskPosTopK)
	boolEq("mask_pos", r.MaskPos)
	boolEq("fg_mask", r.FG)
	intEq := func(name string, got []int32) {
		want := af.i64(prefix + name)
		bad := 0
		for i := range want {
			if int64(got[i]) != want[i] {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s%s: %d of %d entries differ", prefix, name, bad, len(want))
		}
	}
	intEq("target_gt_idx", r.GTIdx)
	intEq("target_labels", r.Labels)
	wantBoxes := af.f32(prefix + "target_bboxes_xyxy_px")
	for i := range wantBoxes {
		if wantBoxes[i] != r.Boxes[i] {
			t.Errorf("%starget_bboxes[%d] = %v, want %v", prefix, i, r.Boxes[i], wantBoxes[i])
			break
		}
	}
	relEq := func(name string, got []float32) {
		want := af.f32(prefix + name)
		worst := 0.0
		for i := range want {
			if (want[i] == 0) != (got[i] == 0) {
				t.Errorf("%s%s[%d]: zero pattern differs (got %v, want %v)", prefix, name, i, got[i], want[i])
				return
			}
			if want[i] != 0 {
				worst = max(worst, relErr(float64(got[i]), float64(want[i])))
			}
		}
		if worst > 1e-4 {
			t.Errorf("%s%s: max rel err %.3g > 1e-4", prefix, name, worst)
		}
		t.Logf("%s%s: max rel err %.3g", prefix, name, worst)
	}
	relEq("align_metric", r.AlignMetric)
	relEq("overlaps", r.Overlaps)
	relEq("target_score_value", r.ScoreValue)
}

// TestAssignerGolden runs the assigner on the stored inputs of each branch
// and compares every stored output and internal.
func TestAssignerGolden(t *testing.T) {
	out, _, dir := goldenCase(t)
	af := openGolden(t, dir, "assigner.safetensors")
	probs := make([]float32, len(out.One2Many.Scores))
	for i, x := range out.One2Many.Scores {
		probs[i] = float32(sigmoid(float64(x)))
	}
	for _, br := range []struct {
		prefix string
		cfg    AssignerConfig
		fg     int
	}{{"one2many.", One2ManyAssigner(), 83}, {"one2one.", One2OneAssigner(), 11}} {
		t.Run(br.prefix[:len(br.prefix)-1], func(t *testing.T) {
			labels := af.f32(br.prefix + "gt_labels")
			maskGT := af.f32(br.prefix + "mask_gt")
			in := &AssignInput{B: 2, A: 336, NC: 80, M: 8,
				PdScores: probs, PdBoxes: af.f32(br.prefix + "pd_bboxes_px"),
				Anchors: af.f32(br.prefix + "anchor_points_px"), GTBoxes: af.f32(br.prefix + "gt_bboxes_xyxy_px"),
				GTLabels: make([]int32, len(labels)), MaskGT: make([]bool, len(maskGT))}
			for i := range labels {
				in.GTLabels[i] = int32(labels[i])
				in.MaskGT[i] = maskGT[i] != 0
			}
			as, err := NewAssigner(br.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := as.Assign(in)
			if err != nil {
				t.Fatal(err)
			}
			if r.NumFG != br.fg {
				t.Errorf("positives %d, want %d", r.NumFG, br.fg)
			}
			compareAssignment(t, af, br.prefix, r)
		})
	}
}

type goldenLosses struct {
	Epoch0 struct {
		O2M      float64   `json:"o2m_weight"`
		O2MVec   []float64 `json:"one2many_loss_x_bs"`
		O2OVec   []float64 `json:"one2one_loss_x_bs"`
		O2OItems []float64 `json:"one2one_items"`
		Combined []float64 `json:"combined_vector"`
		Total    float64   `json:"total"`
	} `json:"epoch0"`
	Last struct {
		Combined []float64 `json:"combined_vector"`
		Total    float64   `json:"total"`
	} `json:"last_epoch"`
	ScoreSum map[string]float64 `json:"target_scores_sum"`
	NumFG    map[string]int     `json:"num_fg"`
}

type tensorStats struct {
	Numel  int     `json:"numel"`
	Sum    float64 `json:"sum"`
	AbsSum float64 `json:"abs_sum"`
	L2     float64 `json:"l2"`
	AbsMax float64 `json:"absmax"`
}

// TestLossGolden feeds the golden outputs and batch to the criterion and
// checks the assignment it computes, every loss component, both totals,
// and the gradients of the total w.r.t. every output.
func TestLossGolden(t *testing.T) {
	out, tg, dir := goldenCase(t)
	want := readGoldenLosses(t, dir)
	c, err := NewCriterion(DefaultConfig(100))
	if err != nil {
		t.Fatal(err)
	}
	grads := out.Grads()
	res, err := c.Forward(out, tg, grads)
	if err != nil {
		t.Fatal(err)
	}
	af := openGolden(t, dir, "assigner.safetensors")
	o2m, o2o := c.Assignments()
	t.Run("assignment/one2many", func(t *testing.T) { compareAssignment(t, af, "one2many.", o2m) })
	t.Run("assignment/one2one", func(t *testing.T) { compareAssignment(t, af, "one2one.", o2o) })

	check := func(name string, got, want float64) { t.Helper(); checkRel(t, name, got, want) }
	for k := 0; k < NumComponents; k++ {
		check("one2many."+ComponentNames[k], res.One2Many[k], want.Epoch0.O2MVec[k])
		check("one2one."+ComponentNames[k], res.One2One[k], want.Epoch0.O2OVec[k])
		check("items."+ComponentNames[k], res.Items[k], want.Epoch0.O2OItems[k])
		check("combined."+ComponentNames[k], res.Combined[k], want.Epoch0.Combined[k])
	}
	check("total epoch 0", res.Total, want.Epoch0.Total)
	check("score sum one2many", res.ScoreSum[0], want.ScoreSum["one2many"])
	check("score sum one2one", res.ScoreSum[1], want.ScoreSum["one2one"])
	if res.NumFG != [2]int{want.NumFG["one2many"], want.NumFG["one2one"]} {
		t.Errorf("positives %v, want %v", res.NumFG, want.NumFG)
	}

	checkGoldenGrads(t, dir, grads)

	// The last epoch: 99 updates give o2m 0.1.
	c.SetUpdates(99)
	res, err = c.Forward(out, tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < NumComponents; k++ {
		check("last combined."+ComponentNames[k], res.Combined[k], want.Last.Combined[k])
	}
	check("total last epoch", res.Total, want.Last.Total)
}

// checkGoldenGrads compares the output gradients of epoch 0 with the
// reference: stored tensors element-wise, the score and semseg gradients
// through their statistics.
func checkGoldenGrads(t *testing.T, dir string, grads *Grads) {
	t.Helper()
	gf := openGolden(t, dir, "output_grads.safetensors")
	var stats struct {
		Out map[string]tensorStats `json:"output_grad_stats_epoch0"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &stats); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		got  []float32
	}{
		{"one2many.boxes", grads.One2Many.Boxes}, {"one2one.boxes", grads.One2One.Boxes},
		{"one2many.mask_coefficient", grads.One2Many.Coef}, {"one2one.mask_coefficient", grads.One2One.Coef},
		{"proto", grads.Proto},
	} {
		ref := gf.f32(g.name)
		absmax, worst := 0.0, 0.0
		for i := range ref {
			absmax = max(absmax, math.Abs(float64(ref[i])))
			worst = max(worst, math.Abs(float64(g.got[i]-ref[i])))
		}
		if worst > 1e-4*absmax {
			t.Errorf("grad %s: max abs err %.3g > 1e-4·absmax (%.3g)", g.name, worst, absmax)
		} else {
			t.Logf("grad %s: max abs err %.3g, absmax %.3g (ratio %.2g)", g.name, worst, absmax, worst/absmax)
		}
	}
	for _, g := range []struct {
		name string
		got  []float32
	}{
		{"one2many.scores", grads.One2Many.Scores}, {"one2one.scores", grads.One2One.Scores},
		{"semseg", grads.Semseg},
		{"one2many.boxes", grads.One2Many.Boxes}, {"proto", grads.Proto},
	} {
		st := stats.Out[g.name]
		var sum, abs, l2, amax float64
		for _, v := range g.got {
			x := float64(v)
			sum += x
			abs += math.Abs(x)
			l2 += x * x
			amax = max(amax, math.Abs(x))
		}
		l2 = math.Sqrt(l2)
		if relErr(l2, st.L2) > 1e-4 || relErr(abs, st.AbsSum) > 1e-4 || math.Abs(sum-st.Sum) > 1e-4*st.AbsSum || relErr(amax, st.AbsMax) > 1e-4 {
			t.Errorf("grad %s stats: sum %.7g/%.7g abs_sum %.7g/%.7g l2 %.7g/%.7g absmax %.7g/%.7g",
				g.name, sum, st.Sum, abs, st.AbsSum, l2, st.L2, amax, st.AbsMax)
		} else {
			t.Logf("grad %s stats: l2 rel %.2g, abs_sum rel %.2g", g.name, relErr(l2, st.L2), relErr(abs, st.AbsSum))
		}
	}

}

func readGoldenLosses(t *testing.T, dir string) goldenLosses {
	t.Helper()
	var want goldenLosses
	raw, err := os.ReadFile(filepath.Join(dir, "losses.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

// checkRel requires got within rel 1e-4 of the reference's want.
func checkRel(t *testing.T, name string, got, want float64) {
	t.Helper()
	e := relErr(got, want)
	if e > 1e-4 {
		t.Errorf("%s = %.7g, want %.7g (rel %.3g)", name, got, want, e)
	} else {
		t.Logf("%s = %.7g, want %.7g (rel %.2g)", name, got, want, e)
	}
}

// TestLossGoldenOnBackends runs the golden batch through ForwardOn on
// every backend (cpu, emu, and the host round trip of a backend without a
// loss kernel): the loss items, both totals and every output gradient
// match the reference, and each backend equals cpu bit for bit.
func TestLossGoldenOnBackends(t *testing.T) {
	out, tg, dir := goldenCase(t)
	want := readGoldenLosses(t, dir)
	type run struct {
		items       [NumComponents]float64
		total, last float64
		grads       *Grads
	}
	var runs []run
	bes := lossBackends()
	for _, nb := range bes {
		var r run
		t.Run(nb.name, func(t *testing.T) {
			c, err := NewCriterion(DefaultConfig(100))
			if err != nil {
				t.Fatal(err)
			}
			d := newOnBackend(nb.be, out)
			r.items, r.total, r.grads, err = d.run(c, out.Geometry, tg, true)
			if err != nil {
				t.Fatal(err)
			}
			for k := range NumComponents {
				checkRel(t, "items."+ComponentNames[k], r.items[k], want.Epoch0.O2OItems[k])
			}
			checkRel(t, "total epoch 0", r.total, want.Epoch0.Total)
			checkGoldenGrads(t, dir, r.grads)
			c.SetUpdates(99)
			if _, r.last, _, err = d.run(c, out.Geometry, tg, false); err != nil {
				t.Fatal(err)
			}
			checkRel(t, "total last epoch", r.last, want.Last.Total)
		})
		runs = append(runs, r)
	}
	for i, r := range runs[1:] {
		ref := runs[0]
		if r.grads == nil || ref.grads == nil {
			t.Fatal("a backend did not run")
		}
		if r.items != ref.items || math.Float64bits(r.total) != math.Float64bits(ref.total) || math.Float64bits(r.last) != math.Float64bits(ref.last) {
			t.Errorf("%s: items %v totals %v %v, cpu %v %v %v", bes[i+1].name, r.items, r.total, r.last, ref.items, ref.total, ref.last)
		}
		gs, ws := gradSlices(r.grads), gradSlices(ref.grads)
		for k := range gs {
			if j := sameBits(gs[k], ws[k]); j >= 0 {
				t.Errorf("%s: gradient %d differs from cpu at %d", bes[i+1].name, k, j)
			}
		}
	}
}
