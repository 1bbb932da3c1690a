package model

import (
	"math"
	"testing"
)

// TestForwardMatchesReferenceGoldens loads the reference implementation's
// yolo26n-seg weights (F16-rounded, exact in F32), runs one train-mode
// forward on the reference batch and compares every output and the
// BatchNorm running statistics the forward leaves behind.
func TestForwardMatchesReferenceGoldens(t *testing.T) {
	dir := sharedPath(t, "goldens/loss")
	w := readST(t, dir+"/weights.safetensors")
	m, err := New(Config{Variant: "n", Classes: 80})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadState(w, LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	img := tensorOf(t, readST(t, dir+"/batch.safetensors"), "img")
	out, err := m.Forward(nil, img, Train)
	if err != nil {
		t.Fatal(err)
	}
	ref := readST(t, dir+"/outputs.safetensors")
	const rel = 1e-4
	for _, br := range []struct {
		name string
		b    *Branch
	}{{"one2many", out.One2Many}, {"one2one", &out.One2One}} {
		compareTensor(t, br.name+".boxes", br.b.Boxes, tensorOf(t, ref, "boxes"), rel)
		compareTensor(t, br.name+".scores", br.b.Scores, tensorOf(t, ref, "scores"), rel)
		compareTensor(t, br.name+".mask_coefficient", br.b.MaskCoefficients, tensorOf(t, ref, "mask_coefficient"), rel)
	}
	for i, f := range out.Feats {
		compareTensor(t, "feats."+itoa(i), f, tensorOf(t, ref, "feats."+itoa(i)), rel)
	}
	compareTensor(t, "proto", out.Proto, tensorOf(t, ref, "proto"), rel)
	compareTensor(t, "semseg", out.Semseg, tensorOf(t, ref, "semseg"), rel)

	stats := readStats(t, dir+"/stats.json", "bn_running_after_forward_stats")
	checked := 0
	for _, p := range m.State() {
		if !p.Buffer {
			continue
		}
		s, ok := stats[p.Name]
		if !ok {
			t.Errorf("stats.json lacks %s", p.Name)
			continue
		}
		got := l2(p.Value.Host())
		if math.Abs(got-s.L2) > 1e-4*s.L2 {
			t.Errorf("%s: l2 %.8g, reference %.8g", p.Name, got, s.L2)
		}
		checked++
	}
	if checked != 268 {
		t.Errorf("checked %d running statistics, want 268 (134 BN × 2)", checked)
	}
	for _, nb := range m.BatchNorms() {
		if nb.BN.NumBatchesTracked != 1 {
			t.Fatalf("%s.num_batches_tracked = %d after one train forward", nb.Prefix, nb.BN.NumBatchesTracked)
		}
	}
}
