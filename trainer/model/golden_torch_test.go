package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

var goldenCheckpoint = flag.String("golden-checkpoint", "", "write the checkpoint gen_goldens.py reads to this path")

const goldenFile = "testdata/goldens_n128.safetensors"

// goldenModel is GoldenReference, the n model the PyTorch goldens were
// made from, failing the test on error.
func goldenModel(t testing.TB) *Model {
	t.Helper()
	m, err := GoldenReference()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// weightsDigest hashes the state dict as gen_goldens.py does: for each
// name in sorted order, name NUL dtype NUL raw bytes.
func weightsDigest(t testing.TB, m *Model) string {
	t.Helper()
	f, err := m.StateDict()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, k := range f.Names() {
		x := f.Tensors[k]
		h.Write([]byte(k + "\x00" + string(x.DType) + "\x00"))
		h.Write(x.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestWriteGoldenCheckpoint writes the input of gen_goldens.py when
// -golden-checkpoint is given (see the script's header).
func TestWriteGoldenCheckpoint(t *testing.T) {
	if *goldenCheckpoint == "" {
		t.Skip("pass -golden-checkpoint PATH to write the checkpoint for gen_goldens.py")
	}
	if err := goldenModel(t).SaveCheckpoint(*goldenCheckpoint, Meta{Imgsz: 128}); err != nil {
		t.Fatal(err)
	}
}

// compareGrad checks a gradient against a golden stored by the rule of
// gen_goldens.py: elements (full or 256 samples) within 1e-4·absmax, and
// the full tensor's l2 and abs_sum within rel 1e-4, its sum within
// 1e-4·abs_sum.
func compareGrad(t *testing.T, name string, got []float32, ref []float32, st []float32) float64 {
	t.Helper()
	n := len(got)
	absmax := float64(st[3])
	sample := got
	if len(ref) != n {
		sample = make([]float32, len(ref))
		for k := range ref {
			sample[k] = got[(k*n)/len(ref)]
		}
	}
	var maxErr float64
	for i := range ref {
		maxErr = math.Max(maxErr, math.Abs(float64(sample[i])-float64(ref[i])))
	}
	var sum, abs, sq float64
	for _, g := range got {
		sum += float64(g)
		abs += math.Abs(float64(g))
		sq += float64(g) * float64(g)
	}
	l2 := math.Sqrt(sq)
	rs, rabs, rl2 := float64(st[0]), float64(st[1]), float64(st[2])
	tol := 1e-4
	switch {
	case maxErr > tol*absmax:
		t.Errorf("%s: max abs error %.3g > 1e-4 × absmax %.3g", name, maxErr, absmax)
	case math.Abs(l2-rl2) > tol*rl2:
		t.Errorf("%s: l2 %.8g, golden %.8g", name, l2, rl2)
	case math.Abs(abs-rabs) > tol*rabs:
		t.Errorf("%s: abs_sum %.8g, golden %.8g", name, abs, rabs)
	case math.Abs(sum-rs) > tol*rabs:
		t.Errorf("%s: sum %.8g, golden %.8g (abs_sum %.3g)", name, sum, rs, rabs)
	}
	return maxErr / absmax
}

// TestMatchesPyTorch compares train- and eval-mode outputs, BatchNorm
// running statistics and every parameter gradient with goldens made by
// PyTorch from a checkpoint this package wrote (gen_goldens.py).
// The model matches PyTorch on every backend of the conformance suite.
func TestMatchesPyTorch(t *testing.T) {
	for _, be := range []backend.Backend{cpu.Default(), cpu.NewEmulated()} {
		t.Run(be.Name(), func(t *testing.T) { matchesPyTorch(t, be) })
	}
}

func matchesPyTorch(t *testing.T, be backend.Backend) {
	g, err := safetensors.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (regenerate with testdata/gen_goldens.py)", err)
	}
	m := goldenModel(t)
	if got, want := weightsDigest(t, m), g.Metadata["weights_sha256"]; got != want {
		t.Fatalf("the goldens were made from weights %s, goldenModel now gives %s: regenerate them", want, got)
	}
	m.To(be)
	x := tensorOf(t, g, "input")
	x = tensor.Upload(be, x.Host(), x.Shape...)
	f32 := func(name string) []float32 {
		v, _, err := g.Float32s(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var zero []string
	if err := json.Unmarshal([]byte(g.Metadata["zero_by_construction"]), &zero); err != nil {
		t.Fatalf("metadata zero_by_construction: %v", err)
	}
	isZero := map[string]bool{}
	for _, k := range zero {
		isZero[k] = true
	}
	t.Logf("PyTorch float32 vs the float64 goldens: worst %s, median %s", g.Metadata["pytorch_float32_worst_grad_error"], g.Metadata["pytorch_float32_median_grad_error"])
	for _, mode := range []string{"train", "eval"} {
		gmax := 0.0
		for _, p := range m.Params() {
			gmax = math.Max(gmax, float64(f32(mode + ".grad." + p.Name + ".stats")[3]))
		}
		for _, p := range m.Params() {
			p.Value.ZeroGrad()
		}
		tp := tensor.NewTape(be)
		md := Train
		if mode == "eval" {
			md = Eval
		}
		out, err := m.Forward(tp, x, md)
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]*tensor.Tensor{"proto": out.Proto}
		if out.Semseg != nil {
			named["semseg"] = out.Semseg
		}
		branches := map[string]*Branch{"one2one": &out.One2One}
		if out.One2Many != nil {
			branches["one2many"] = out.One2Many
		}
		for bn, b := range branches {
			named[bn+".boxes"], named[bn+".scores"], named[bn+".mask_coefficient"] = b.Boxes, b.Scores, b.MaskCoefficients
		}
		var outs, seeds []*tensor.Tensor
		count := 0
		for _, k := range g.Names() {
			prefix := mode + ".out."
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			key := strings.TrimPrefix(k, prefix)
			got, ok := named[key]
			if !ok {
				t.Errorf("%s: golden output %s not produced", mode, key)
				continue
			}
			compareTensor(t, mode+" "+key, got, tensorOf(t, g, k), 1e-4)
			outs = append(outs, got)
			sd := tensorOf(t, g, "seed."+key)
			seeds = append(seeds, tensor.Upload(be, sd.Host(), sd.Shape...))
			count++
		}
		if count != len(named) {
			t.Errorf("%s: %d outputs produced, %d golden", mode, len(named), count)
		}
		if mode == "train" {
			for _, p := range m.State() {
				if p.Buffer {
					compareTensor(t, p.Name, p.Value, tensorOf(t, g, "train.running."+p.Name), 1e-4)
				}
			}
		}
		if err := tp.BackwardFrom(outs, seeds); err != nil {
			t.Fatal(err)
		}
		worst, worstName := 0.0, ""
		defer func(mode string) { t.Logf("%s: worst gradient error %.3g of absmax (%s)", mode, worst, worstName) }(mode)
		for _, p := range m.Params() {
			k := mode + ".grad." + p.Name
			grad := p.Value.GradToHost(nil) // zeros when no gradient reached it
			if isZero[k] {
				// Mathematically zero (a following train-mode BatchNorm removes
				// any per-channel shift): only float noise is allowed.
				_, s := maxAbs(grad, grad)
				if s > 1e-5*gmax {
					t.Errorf("%s: |grad| reaches %.3g, want ≈0 (≤ 1e-5 × %.3g)", k, s, gmax)
				}
				continue
			}
			if r := compareGrad(t, mode+" grad "+p.Name, grad, f32(k), f32(k+".stats")); r > worst {
				worst, worstName = r, p.Name
			}
		}
	}
}
