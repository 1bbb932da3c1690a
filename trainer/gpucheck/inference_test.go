package gpucheck

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/trainer/internal/modelcase"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudatest"
)

// inference is what validation and prediction take from the model: the
// decoded one-to-one detections and the prototypes, as predict.Infer
// forms them (eval-mode forward, model.Decode, one download).
type inference struct {
	dets  [][]model.Detection
	proto []float32
}

func inferOn(t *testing.T, be backend.Backend, b, sz, maxDet int) inference {
	t.Helper()
	m := iterationModel(t)
	m.To(be)
	img, _ := modelcase.SyntheticBatch(b, sz)
	x := tensor.UploadBytes(be, img, 1.0/255, b, 3, sz, sz)
	out, err := m.Forward(nil, x, model.Eval)
	if err != nil {
		t.Fatal(err)
	}
	dets, err := model.Decode(out, maxDet)
	if err != nil {
		t.Fatal(err)
	}
	return inference{dets: dets, proto: out.Proto.ToHost(nil)}
}

// compareInference checks got against the CPU's want. Decode ranks
// anchors by score, so two near-equal scores may swap between backends;
// a detection is matched to the CPU's of the same anchor and class, and
// every CPU detection scoring above the last kept one by more than the
// tolerance must be found.
func compareInference(t *testing.T, got, want inference, rtol float64) {
	t.Helper()
	protoMax := 0.0
	for _, v := range want.proto {
		protoMax = max(protoMax, math.Abs(float64(v)))
	}
	worstProto := 0.0
	for i := range want.proto {
		worstProto = max(worstProto, math.Abs(float64(got.proto[i]-want.proto[i]))/protoMax)
	}
	if len(got.proto) != len(want.proto) || !(worstProto <= rtol) {
		t.Errorf("prototypes: %d values (cpu %d), worst error %.3g of the largest > %g", len(got.proto), len(want.proto), worstProto, rtol)
	}
	worstBox, worstScore, worstCoef := 0.0, 0.0, 0.0
	for i := range want.dets {
		type key struct{ anchor, class int }
		byKey := map[key]model.Detection{}
		for _, d := range got.dets[i] {
			byKey[key{d.Anchor, d.Class}] = d
		}
		last := want.dets[i][len(want.dets[i])-1].Score
		for _, w := range want.dets[i] {
			g, ok := byKey[key{w.Anchor, w.Class}]
			if !ok {
				if float64(w.Score-last) > rtol {
					t.Errorf("image %d: cpu detection (anchor %d, class %d, score %.6g) missing", i, w.Anchor, w.Class, w.Score)
				}
				continue
			}
			for j := range w.Box {
				worstBox = max(worstBox, math.Abs(float64(g.Box[j]-w.Box[j]))/max(math.Abs(float64(w.Box[j])), 1))
			}
			worstScore = max(worstScore, math.Abs(float64(g.Score-w.Score)))
			for j := range w.Coeffs {
				worstCoef = max(worstCoef, math.Abs(float64(g.Coeffs[j]-w.Coeffs[j]))/max(math.Abs(float64(w.Coeffs[j])), 1))
			}
		}
	}
	t.Logf("prototypes worst %.3g; detections: box %.3g, score %.3g, coefficients %.3g", worstProto, worstBox, worstScore, worstCoef)
	if !(worstBox <= rtol && worstScore <= rtol && worstCoef <= rtol) {
		t.Errorf("detections differ from the cpu's beyond %g", rtol)
	}
}

// TestInferenceOnHarness runs what validation and predict run — the
// eval-mode forward and the end-to-end decode — on the CPU harness (not a
// GPU) and on the CPU backend.
func TestInferenceOnHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("a model forward on the CPU harness takes seconds")
	}
	be := cudatest.Harness(t)
	compareInference(t, inferOn(t, be, 2, 64, 50), inferOn(t, cpu.New(), 2, 64, 50), 1e-3)
}

// TestInferenceOnGPU is the same comparison on GPU 0 at 320 px.
func TestInferenceOnGPU(t *testing.T) {
	be := cudatest.GPU(t)
	compareInference(t, inferOn(t, be, 2, 320, 300), inferOn(t, cpu.New(), 2, 320, 300), 1e-3)
}

// checkpointCrossing saves the golden model from one backend, opens the
// file on the other and saves it again: the files must be byte-identical
// (one format whatever the device, so a run resumes on either).
func checkpointCrossing(t *testing.T, be backend.Backend) {
	t.Helper()
	dir := t.TempDir()
	meta := model.Meta{Imgsz: 64, Step: 7}
	save := func(m *model.Model, name string) []byte {
		p := filepath.Join(dir, name)
		if err := m.SaveCheckpoint(p, meta); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	open := func(name string, on backend.Backend) *model.Model {
		m, _, err := model.OpenCheckpoint(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		m.To(on)
		return m
	}
	m := modelcase.GoldenWeights(t)
	m.To(cpu.New())
	fromCPU := save(m, "cpu.safetensors")
	onDevice := open("cpu.safetensors", be)
	fromDevice := save(onDevice, "device.safetensors")
	if !bytes.Equal(fromCPU, fromDevice) {
		t.Fatalf("a CPU checkpoint loaded on the device and saved again differs (%d vs %d bytes)", len(fromDevice), len(fromCPU))
	}
	back := save(open("device.safetensors", cpu.New()), "back.safetensors")
	if !bytes.Equal(fromCPU, back) {
		t.Fatalf("a device checkpoint opened on the CPU and saved again differs")
	}
}

// TestCheckpointCrossingOnHarness: a checkpoint crosses between the CPU
// backend and the CUDA Backend (on the CPU harness) unchanged.
func TestCheckpointCrossingOnHarness(t *testing.T) {
	be := cudatest.Harness(t)
	checkpointCrossing(t, be)
}

// TestCheckpointCrossingOnGPU is the same crossing with GPU 0.
func TestCheckpointCrossingOnGPU(t *testing.T) {
	checkpointCrossing(t, cudatest.GPU(t))
}
