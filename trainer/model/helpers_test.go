package model

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// sharedPath returns ../shared/<rel>, or the module's copy of it
// (internal/testenv/shared), skipping the test when neither has it.
func sharedPath(t testing.TB, rel string) string {
	t.Helper()
	return shared.Path(t, rel)
}

func readST(t testing.TB, path string) *safetensors.File {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func tensorOf(t testing.TB, f *safetensors.File, name string) *tensor.Tensor {
	t.Helper()
	v, shape, err := f.Float32s(name)
	if err != nil {
		t.Fatal(err)
	}
	return tensor.New(cpu.Default(), v, shape...)
}

// maxAbs returns max|a−b| and max|b|.
func maxAbs(a, b []float32) (diff, scale float64) {
	for i := range b {
		diff = math.Max(diff, math.Abs(float64(a[i])-float64(b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return
}

// compareTensor fails unless got matches want in shape and within
// max|got−want| ≤ rel·max|want|.
func compareTensor(t testing.TB, name string, got, want *tensor.Tensor, rel float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: missing", name)
		return
	}
	if !tensor.SameShape(got, want) {
		t.Errorf("%s: shape %v, want %v", name, got.Shape, want.Shape)
		return
	}
	d, s := maxAbs(got.ToHost(nil), want.ToHost(nil))
	if !(d <= rel*s) {
		t.Errorf("%s: max abs error %.3g > %.1g × scale %.3g", name, d, rel, s)
	} else {
		t.Logf("%s: max abs error %.3g (scale %.3g, ratio %.2g)", name, d, s, d/s)
	}
}

type tensorStats struct {
	Numel  int     `json:"numel"`
	Sum    float64 `json:"sum"`
	AbsSum float64 `json:"abs_sum"`
	L2     float64 `json:"l2"`
	Absmax float64 `json:"absmax"`
}

func readStats(t testing.TB, path, key string) map[string]tensorStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var out map[string]tensorStats
	if err := json.Unmarshal(all[key], &out); err != nil {
		t.Fatalf("%s %s: %v", path, key, err)
	}
	return out
}

func l2(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}
