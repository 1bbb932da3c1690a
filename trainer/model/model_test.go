package model

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor"
)

// Reference figures from the architecture spec (measured on the reference
// implementation), per scale n, s, m, l, x.
var (
	refFull        = []int64{3126280, 11505800, 27112072, 31515528, 70693800}
	refO2M         = []int64{315052, 786140, 2315868, 2315868, 5138652}
	refAux         = []int64{79184, 305744, 1201232, 1201232, 2686544}
	refDeployed    = []int64{2732044, 10413916, 23594972, 27998428, 62868604}
	refDeployFused = []int64{2722980, 10396300, 23569148, 27965436, 62819132}
	refBuffers     = []int64{21430, 40742, 61520, 75910, 113734}
	refBNs         = []int{134, 134, 144, 198, 198}
	// Per-layer parameters (spec §4); layers without parameters omitted.
	refLayer = map[int][]int64{
		0:  {464, 928, 1856, 1856, 2784},
		1:  {4672, 18560, 73984, 73984, 166272},
		2:  {6640, 26080, 111872, 173824, 389760},
		3:  {36992, 147712, 590336, 590336, 1327872},
		4:  {26080, 103360, 444928, 691712, 1553664},
		5:  {147712, 590336, 2360320, 2360320, 5309952},
		6:  {87040, 346112, 1380352, 2234368, 5022720},
		7:  {295424, 1180672, 2360320, 2360320, 5309952},
		8:  {346112, 1380352, 1380352, 2234368, 5022720},
		9:  {164608, 656896, 656896, 656896, 1476864},
		10: {249728, 990976, 990976, 1455616, 3264768},
		13: {119808, 477184, 1642496, 2496512, 5612544},
		16: {34304, 136192, 542720, 756736, 1700352},
		17: {36992, 147712, 590336, 590336, 1327872},
		19: {95232, 378880, 1511424, 2365440, 5317632},
		20: {147712, 590336, 2360320, 2360320, 5309952},
		22: {463104, 1843712, 1974784, 1974784, 4436736},
		23: {863656, 2489800, 8137800, 8137800, 18141384},
	}
	// GFLOPs at 640 (spec §10).
	refTrainGFLOPs      = []float64{11.45, 41.21, 147.41, 165.78, 371.25}
	refThopEvalGFLOPs   = []float64{10.51, 37.42, 132.54, 150.94, 337.65}
	refDeployGFLOPs     = []float64{9.25, 34.46, 121.74, 140.11, 314.04}
	refDeployThop       = []float64{9.13, 34.22, 121.50, 139.75, 313.49}
	refDeployHeadGFLOPs = []float64{4.37, 15.37, 59.90, 59.90, 134.12}
)

func describeAll(t *testing.T) []*Model {
	t.Helper()
	var out []*Model
	for _, s := range Scales {
		m, err := Describe(Config{Variant: s.Name})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestParamCountsMatchReference(t *testing.T) {
	for i, m := range describeAll(t) {
		t.Run(m.Config.Variant, func(t *testing.T) {
			if got := m.NumParams(); got != refFull[i] {
				t.Errorf("params %d, want %d", got, refFull[i])
			}
			for l, want := range refLayer {
				if got := m.LayerParams(l); got != want[i] {
					t.Errorf("layer %d: %d params, want %d", l, got, want[i])
				}
			}
			var buf int64
			for _, p := range m.State() {
				if p.Buffer {
					buf += int64(p.NumElements())
				}
			}
			bns := m.BatchNorms()
			buf += int64(len(bns)) // one num_batches_tracked scalar each
			if buf != refBuffers[i] || len(bns) != refBNs[i] {
				t.Errorf("%d buffer elements in %d BN, want %d in %d", buf, len(bns), refBuffers[i], refBNs[i])
			}
			o2m, aux := m.PartParams()
			if o2m != refO2M[i] || aux != refAux[i] {
				t.Errorf("o2m %d aux %d, want %d %d", o2m, aux, refO2M[i], refAux[i])
			}
		})
	}
}

func TestClassCountChangesOnlyClassLayers(t *testing.T) {
	a, _ := Describe(Config{Variant: "n", Classes: 80})
	b, _ := Describe(Config{Variant: "n", Classes: 3})
	// c3 = max(P3, min(nc, 100)) = 64 for 3 classes: hidden class width
	// shrinks from 80, and the three final class convs, both sets, and
	// the semseg head change.
	if b.NumParams() >= a.NumParams() {
		t.Fatalf("3 classes: %d params, 80 classes: %d", b.NumParams(), a.NumParams())
	}
	for l := 0; l < 23; l++ {
		if a.LayerParams(l) != b.LayerParams(l) {
			t.Errorf("layer %d changed with the class count", l)
		}
	}
	if _, err := Describe(Config{Variant: "q"}); err == nil {
		t.Error("unknown variant accepted")
	}
	if _, err := Describe(Config{Variant: "n", Classes: -1}); err == nil {
		t.Error("negative class count accepted")
	}
}

// readTSV reads key and shape columns of a reference state-dict listing.
func readTSV(t *testing.T, path string) (keys, shapes []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 2 || cols[0] == "key" {
			continue
		}
		keys = append(keys, cols[0])
		shapes = append(shapes, cols[1])
	}
	return keys, shapes
}

func shapeString(s []int) string {
	if len(s) == 0 {
		return "scalar"
	}
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, "x")
}

func modelShapes(m *Model) map[string]string {
	out := map[string]string{}
	for _, p := range m.State() {
		out[p.Name] = shapeString(p.Shape)
	}
	for _, nb := range m.BatchNorms() {
		out[nb.Prefix+".num_batches_tracked"] = "scalar"
	}
	return out
}

// TestStateKeysMatchReferenceTSV checks every key, in order, and its shape
// against the reference state-dict of n, for the train graph and for the
// deployed, BN-folded graph.
func TestStateKeysMatchReferenceTSV(t *testing.T) {
	for _, c := range []struct {
		file   string
		deploy bool
	}{{"specs/yolo26n-seg_state_dict.tsv", false}, {"specs/yolo26n-seg_fused_state_dict.tsv", true}} {
		keys, shapes := readTSV(t, sharedPath(t, c.file))
		m, _ := Describe(Config{Variant: "n"})
		if c.deploy {
			var err error
			if m, err = m.Deploy(true); err != nil {
				t.Fatal(err)
			}
		}
		got := m.StateKeys()
		if len(got) != len(keys) {
			t.Errorf("%s: %d keys, reference %d", c.file, len(got), len(keys))
		}
		sh := modelShapes(m)
		for i := range min(len(got), len(keys)) {
			if got[i] != keys[i] {
				t.Errorf("%s: key %d is %s, reference %s", c.file, i, got[i], keys[i])
				break
			}
			if sh[keys[i]] != shapes[i] {
				t.Errorf("%s: %s shape %s, reference %s", c.file, keys[i], sh[keys[i]], shapes[i])
			}
		}
	}
}

func TestFLOPsMatchReference(t *testing.T) {
	for i, m := range describeAll(t) {
		train, _, err := m.CountFLOPs(640, true)
		if err != nil {
			t.Fatal(err)
		}
		eval, _, _ := m.CountFLOPs(640, false)
		// The reference summary runs eval mode with both branch sets: add the
		// one-to-many set, which costs what the one-to-one set costs.
		o2m := branchFLOPs(m, 640)
		withO2M := eval
		withO2M.add(o2m)
		d, _ := m.Deploy(true)
		dep, depLayers, _ := d.CountFLOPs(640, false)
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"train 2×MAC", train.GFLOPs(), refTrainGFLOPs[i]},
			{"eval+o2m thop", withO2M.ThopGFLOPs(), refThopEvalGFLOPs[i]},
			{"deployed 2×MAC", dep.GFLOPs(), refDeployGFLOPs[i]},
			{"deployed thop", dep.ThopGFLOPs(), refDeployThop[i]},
			{"deployed layer 23", depLayers[23].GFLOPs(), refDeployHeadGFLOPs[i]},
		} {
			if math.Abs(c.got-c.want) > 0.005+1e-9 {
				t.Errorf("%s %s: %.3f GFLOPs, reference %.2f", m.Config.Variant, c.name, c.got, c.want)
			}
		}
		if dep.BNElements != 0 {
			t.Errorf("%s: fused model still normalises %d elements", m.Config.Variant, dep.BNElements)
		}
	}
}

// branchFLOPs counts one branch set (box, class, mask over three levels).
func branchFLOPs(m *Model, imgsz int) FLOPs {
	c := &counter{}
	h := m.Head()
	ch := [3]int{}
	for i, f := range m.Layers[len(m.Layers)-1].From {
		ch[i] = m.Layers[f].OutCh
	}
	var feats [3]*tensor.Tensor
	for i, s := range Strides {
		feats[i] = shaped(1, ch[i], imgsz/s, imgsz/s)
	}
	branchSet(c, h.O2OCv2, h.O2OCv3, h.O2OCv4, feats)
	return c.f
}

// TestFidelityGate records which reading of the published table (deployed
// model, BN folded: 2.7 M / 9.1 B, ...) each figure matches and fails if a
// change moves any of them out of tolerance (params ±3%, FLOPs ±5%).
func TestFidelityGate(t *testing.T) {
	pubParams := []float64{2.7e6, 10.4e6, 23.6e6, 28.0e6, 62.8e6}
	pubGFLOPs := []float64{9.1, 34.2, 121.5, 139.8, 313.5}
	for i, m := range describeAll(t) {
		d, err := m.Deploy(true)
		if err != nil {
			t.Fatal(err)
		}
		dp := float64(d.NumParams())
		f, _, _ := d.CountFLOPs(640, false)
		dev := func(got, want float64) float64 { return (got - want) / want }
		readings := []struct {
			name     string
			dev, tol float64
		}{
			{"deployed+fused params", dev(dp, pubParams[i]), 0.03},
			{"deployed GFLOPs, 2×MAC incl. attention matmuls", dev(f.GFLOPs(), pubGFLOPs[i]), 0.05},
			{"deployed GFLOPs, thop rules (conv only)", dev(f.ThopGFLOPs(), pubGFLOPs[i]), 0.05},
		}
		for _, r := range readings {
			if math.Abs(r.dev) > r.tol {
				t.Errorf("%s %s: %+.2f%% outside ±%.0f%%", m.Config.Variant, r.name, 100*r.dev, 100*r.tol)
			}
			t.Logf("%s %s: %+.2f%%", m.Config.Variant, r.name, 100*r.dev)
		}
		// The full train graph is NOT what the table counts: it lies
		// outside the tolerance at every scale.
		if full := dev(float64(m.NumParams()), pubParams[i]); math.Abs(full) <= 0.03 {
			t.Errorf("%s: full-graph params %+.2f%% also within tolerance; the reading is ambiguous", m.Config.Variant, 100*full)
		}
	}
}

func TestDeployIdentity(t *testing.T) {
	models := describeAll(t)
	full, err := New(Config{Variant: "n"})
	if err != nil {
		t.Fatal(err)
	}
	models = append(models, full)
	for _, m := range models {
		name := fmt.Sprintf("%s/weights=%v", m.Config.Variant, m.HasWeights())
		t.Run(name, func(t *testing.T) {
			d, err := m.Deploy(false)
			if err != nil {
				t.Fatal(err)
			}
			params := map[*Param]bool{}
			values := map[any]bool{}
			for _, p := range m.State() {
				params[p] = true
				if p.Value != nil {
					values[p.Value] = true
				}
			}
			for _, p := range d.State() {
				if !params[p] {
					t.Errorf("deployed %s is not one of the full model's parameters", p.Name)
				}
				if p.Value != nil && !values[p.Value] {
					t.Errorf("deployed %s holds a tensor the full model does not", p.Name)
				}
			}
			banned := map[Module]string{}
			for _, tm := range m.TrainingOnly() {
				Walk(tm, func(path string, x Module) { banned[x] = path })
			}
			if len(banned) == 0 {
				t.Fatal("full model has no training-only modules")
			}
			for _, l := range d.Layers {
				Walk(l.Module, func(path string, x Module) {
					if _, bad := banned[x]; bad {
						t.Errorf("deployed layer %d has training-only module at %q", l.Index, path)
					}
					if l.Index != 23 {
						return
					}
					if strings.Contains(path, "semseg") || strings.HasPrefix(path, "cv2") || strings.HasPrefix(path, "cv3") || strings.HasPrefix(path, "cv4") {
						t.Errorf("deployed layer %d has module at %q", l.Index, path)
					}
				})
			}
			if len(d.TrainingOnly()) != 0 {
				t.Error("deployed model reports training-only modules")
			}
			for _, k := range d.StateKeys() {
				if strings.Contains(k, "semseg") || strings.HasPrefix(k, "model.23.cv") {
					t.Errorf("deployed state has %s", k)
				}
			}
		})
	}
}

func TestDeployArithmetic(t *testing.T) {
	for i, m := range describeAll(t) {
		full := m.NumParams()
		o2m, aux := m.PartParams()
		d, err := m.Deploy(false)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.NumParams(); got != full-aux-o2m || got != refDeployed[i] {
			t.Errorf("%s: deployed %d, full−aux−o2m = %d−%d−%d = %d, reference %d", m.Config.Variant, got, full, aux, o2m, full-aux-o2m, refDeployed[i])
		}
		f, err := m.Deploy(true)
		if err != nil {
			t.Fatal(err)
		}
		// Folding turns each BN's 2c parameters into c conv biases.
		var bnCh int64
		for _, nb := range d.BatchNorms() {
			bnCh += int64(nb.BN.C)
		}
		if got := f.NumParams(); got != d.NumParams()-bnCh || got != refDeployFused[i] {
			t.Errorf("%s: fused %d, deployed−BN channels = %d, reference %d", m.Config.Variant, got, d.NumParams()-bnCh, refDeployFused[i])
		}
		if len(f.BatchNorms()) != 0 {
			t.Errorf("%s: fused model has BatchNorm", m.Config.Variant)
		}
	}
}
