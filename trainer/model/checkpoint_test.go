package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/formats/safetensors"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

func randomInput(seed uint64, shape ...int) *tensor.Tensor {
	x := tensor.ZerosOn(cpu.Default(), shape...)
	s := seed*6364136223846793005 + 1442695040888963407
	for i := range x.Host() {
		s = s*6364136223846793005 + 1442695040888963407
		x.Host()[i] = float32(s>>40) / float32(1<<24)
	}
	return x
}

func TestCheckpointRoundTripBitExact(t *testing.T) {
	m, err := New(Config{Variant: "n", Classes: 7, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// A train forward moves the running statistics and counters away from
	// their initial values, so the round trip covers them too.
	if _, err := m.Forward(nil, randomInput(1, 2, 3, 64, 64), Train); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ckpt.safetensors")
	cfg := json.RawMessage(`{"lr0":0.01,"epochs":100}`)
	if err := m.SaveCheckpoint(path, Meta{Imgsz: 640, Step: 1234, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	got, meta, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Variant != "n" || meta.Classes != 7 || meta.Imgsz != 640 || meta.Step != 1234 || string(meta.Config) != string(cfg) {
		t.Errorf("meta %+v", meta)
	}
	a, b := m.State(), got.State()
	for i := range a {
		if a[i].Name != b[i].Name {
			t.Fatalf("order: %s vs %s", a[i].Name, b[i].Name)
		}
		for j := range a[i].Value.Host() {
			if math.Float32bits(a[i].Value.Host()[j]) != math.Float32bits(b[i].Value.Host()[j]) {
				t.Fatalf("%s[%d]: %v vs %v", a[i].Name, j, a[i].Value.Host()[j], b[i].Value.Host()[j])
			}
		}
	}
	for i, nb := range got.BatchNorms() {
		if want := m.BatchNorms()[i].BN.NumBatchesTracked; nb.BN.NumBatchesTracked != want || want != 1 {
			t.Fatalf("%s counter %d, want %d", nb.Prefix, nb.BN.NumBatchesTracked, want)
		}
	}
	// Saving the loaded model gives the same bytes.
	path2 := filepath.Join(t.TempDir(), "again.safetensors")
	if err := got.SaveCheckpoint(path2, meta); err != nil {
		t.Fatal(err)
	}
	b1, _ := os.ReadFile(path)
	b2, _ := os.ReadFile(path2)
	if !bytes.Equal(b1, b2) {
		t.Error("re-saved checkpoint differs")
	}
	// LoadCheckpoint into an existing model of the same config works.
	other, _ := New(Config{Variant: "n", Classes: 7, Seed: 99})
	if _, err := other.LoadCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	if other.State()[0].Value.Host()[0] != m.State()[0].Value.Host()[0] {
		t.Error("LoadCheckpoint did not copy the weights")
	}
}

func TestStrictLoadListsEveryProblem(t *testing.T) {
	m, _ := New(Config{Variant: "n"})
	f, err := m.StateDict()
	if err != nil {
		t.Fatal(err)
	}
	delete(f.Tensors, "model.0.conv.weight")
	delete(f.Tensors, "model.23.proto.cv3.bn.running_var")
	f.Tensors["model.99.extra"] = f.Tensors["model.1.bn.bias"]
	bad, _ := safetensors.FromFloat32(safetensors.F32, []int{3}, []float32{1, 2, 3})
	f.Tensors["model.1.bn.weight"] = bad
	before := m.State()[3].Value.Host()[0]
	err = m.LoadState(f, LoadOptions{})
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *LoadError", err)
	}
	if len(le.Missing) != 2 || len(le.Unexpected) != 1 || len(le.Mismatched) != 1 {
		t.Fatalf("missing %v unexpected %v mismatched %v", le.Missing, le.Unexpected, le.Mismatched)
	}
	for _, w := range []string{"model.0.conv.weight", "model.23.proto.cv3.bn.running_var", "model.99.extra", "model.1.bn.weight: file [3], model [32]"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	if m.State()[3].Value.Host()[0] != before {
		t.Error("a failed strict load modified the model")
	}
	// Relaxed loading still refuses shape mismatches.
	if err := m.LoadState(f, LoadOptions{AllowMissing: true, AllowUnexpected: true}); err == nil || !strings.Contains(err.Error(), "model.1.bn.weight") {
		t.Errorf("relaxed load: %v", err)
	}
	f.Tensors["model.1.bn.weight"] = f.Tensors["model.1.bn.bias"]
	if err := m.LoadState(f, LoadOptions{AllowMissing: true, AllowUnexpected: true}); err != nil {
		t.Errorf("relaxed load: %v", err)
	}
}

func TestCheckpointGraphs(t *testing.T) {
	m, _ := New(Config{Variant: "n", Seed: 6})
	if _, err := m.Forward(nil, randomInput(2, 2, 3, 64, 64), Train); err != nil {
		t.Fatal(err)
	}
	x := randomInput(3, 1, 3, 64, 64)
	ref, _ := m.Forward(nil, x, Eval)
	dir := t.TempDir()
	for _, fuse := range []bool{false, true} {
		d, _ := m.Deploy(fuse)
		path := filepath.Join(dir, d.Graph()+".safetensors")
		if err := d.SaveCheckpoint(path, Meta{}); err != nil {
			t.Fatal(err)
		}
		got, meta, err := OpenCheckpoint(path)
		if err != nil {
			t.Fatal(err)
		}
		if meta.Graph != d.Graph() || got.Graph() != d.Graph() || got.NumParams() != d.NumParams() {
			t.Fatalf("graph %s: reopened as %s / %s with %d params", d.Graph(), meta.Graph, got.Graph(), got.NumParams())
		}
		out, err := got.Forward(nil, x, Eval)
		if err != nil {
			t.Fatal(err)
		}
		compareTensor(t, d.Graph()+" scores", out.One2One.Scores, ref.One2One.Scores, 1e-4)
		if _, err := m.LoadCheckpoint(path); err == nil || !strings.Contains(err.Error(), "holds the "+d.Graph()+" graph") {
			t.Errorf("loading a %s checkpoint into the train graph: %v", d.Graph(), err)
		}
	}
}

func TestCheckpointOfAnotherScaleRefused(t *testing.T) {
	s, _ := New(Config{Variant: "s"})
	path := filepath.Join(t.TempDir(), "s.safetensors")
	if err := s.SaveCheckpoint(path, Meta{Imgsz: 640}); err != nil {
		t.Fatal(err)
	}
	n, _ := New(Config{Variant: "n"})
	_, err := n.LoadCheckpoint(path)
	if err == nil || !strings.Contains(err.Error(), `variant "s"`) || !strings.Contains(err.Error(), `variant "n"`) {
		t.Fatalf("got %v", err)
	}
	// Without metadata the shapes give the scale away.
	f, _ := s.StateDict()
	err = n.LoadState(f, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `shapes are those of variant "s"`) {
		t.Fatalf("got %v", err)
	}
	// Another class count of the same scale says so.
	k, _ := New(Config{Variant: "n", Classes: 5})
	f, _ = k.StateDict()
	if err := n.LoadState(f, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "5 classes, the model 80") {
		t.Fatalf("got %v", err)
	}
}

func TestCheckpointBadFiles(t *testing.T) {
	dir := t.TempDir()
	n, _ := New(Config{Variant: "n"})
	noMeta := filepath.Join(dir, "nometa.safetensors")
	f, _ := n.StateDict()
	if err := safetensors.WriteFile(noMeta, f); err != nil {
		t.Fatal(err)
	}
	if _, err := n.LoadCheckpoint(noMeta); err == nil || !strings.Contains(err.Error(), "no checkpoint metadata") {
		t.Errorf("no metadata: %v", err)
	}
	trunc := filepath.Join(dir, "trunc.safetensors")
	if err := n.SaveCheckpoint(trunc, Meta{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(trunc)
	os.WriteFile(trunc, b[:len(b)-10], 0o644)
	if _, err := n.LoadCheckpoint(trunc); err == nil || !strings.Contains(err.Error(), "trunc.safetensors") {
		t.Errorf("truncated: %v", err)
	}
	if err := n.SaveCheckpoint(filepath.Join(dir, "x.safetensors"), Meta{Config: json.RawMessage("{")}); err == nil {
		t.Error("invalid config JSON accepted")
	}
	d, _ := Describe(Config{Variant: "n"})
	if _, err := d.StateDict(); !errors.Is(err, ErrNoWeights) {
		t.Errorf("Describe model StateDict: %v", err)
	}
}
