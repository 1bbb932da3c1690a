package train

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/atomicfile"
	"github.com/segpipe/segpipe/pipeline"
	"github.com/segpipe/segpipe/pipeline/order"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/predict"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// frozenSet is one release's frozen reference (reference.json).
type frozenSet struct {
	Release string `json:"release"`
	// LoaderBatches holds the SHA-256 of the first batches' images,
	// boxes, classes, crowd flags and masks (exact).
	LoaderBatches []string `json:"loader_batch_sha256"`
	// LossItems holds the loss items (box, seg, cls, dfl, sem) of each of
	// the first training steps.
	LossItems [][]float64 `json:"loss_items"`
	// BoxStats and MaskStats are the 12 COCO numbers of the checkpoint
	// after those steps, on the validation images.
	BoxStats  []float64 `json:"box_stats"`
	MaskStats []float64 `json:"mask_stats"`
	// TopScores holds each validation image's highest detection scores.
	TopScores []float64 `json:"top_scores"`
}

// Tolerances of the float comparisons: the reference may have been cut on
// a CPU with other GEMM kernels (AVX-512 vs AVX2 round differently), and
// rounding differences grow over training steps.
const (
	frozenLossRTol = 2e-3 // relative, per loss item and top score
	frozenEvalATol = 2e-3 // absolute, per COCO number
)

const (
	frozenSteps     = 20
	frozenBatches   = 3
	frozenTopScores = 5
)

// computeFrozen runs the fixed-seed recipe: synthetic shards, the loader's
// first batches, frozenSteps training steps of variant n at 128 px on the
// CPU, and validation of the resulting weights.
func computeFrozen(t *testing.T) frozenSet {
	shards, _, _ := synthShards(t, 8)
	src, cats := open(t, shards)
	cfg := DefaultConfig()
	cfg.Variant, cfg.Imgsz, cfg.Batch, cfg.Epochs, cfg.Workers, cfg.Seed = "n", 128, 2, 1, 1, 7
	cfg.MaxDet = 100
	ctx := context.Background()
	fs := frozenSet{Release: FrozenReference}

	ld, err := pipeline.New(ctx, pipeline.Repeat(src, 1), pipeline.Config{BatchSize: cfg.Batch, Workers: 1, Augment: defaultAugFrom(cfg), Epochs: 1, Start: order.State{Seed: cfg.Seed}})
	if err != nil {
		t.Fatal(err)
	}
	for range frozenBatches {
		rec, err := ld.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs.LoaderBatches = append(fs.LoaderBatches, batchDigest(t, rec))
		rec.Release()
	}
	ld.Close()

	tr := &trainer{opt: Options{Config: cfg, Train: Local(src), Categories: cats, Out: t.TempDir()}, log: discardLogger()}
	if err := tr.setup(); err != nil {
		t.Fatal(err)
	}
	ld, err = pipeline.New(ctx, pipeline.Repeat(src, 10), pipeline.Config{BatchSize: cfg.Batch, Workers: 1, Augment: defaultAugFrom(cfg), Epochs: 1, Start: order.State{Seed: cfg.Seed}})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	tp := tensor.NewTape(tr.be)
	var gs gradSet
	for range frozenSteps {
		rec, err := ld.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ep Epoch
		if _, err := tr.step(tp, rec, 0, &gs, &ep); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		tr.st.NI++
		fs.LossItems = append(fs.LossItems, slices.Clone(ep.Loss[:]))
	}
	// Weights 20 steps from random score no mAP yet, so the evaluation
	// also keeps each image's top detection scores.
	vc := ValConfig{Imgsz: cfg.Imgsz, Batch: cfg.Batch, Workers: 1, Conf: 0.001, MaxDet: cfg.MaxDet}
	box, mask, err := validate(ctx, Local(src), vc, func(rec arrow.RecordBatch) ([][]model.Detection, [][]float32, error) {
		dets, protos, err := predict.Infer(tr.m, rec, vc.MaxDet)
		for _, d := range dets {
			for _, x := range d[:min(frozenTopScores, len(d))] {
				fs.TopScores = append(fs.TopScores, float64(x.Score))
			}
		}
		return dets, protos, err
	})
	if err != nil {
		t.Fatal(err)
	}
	fs.BoxStats, fs.MaskStats = box.Stats[:], mask.Stats[:]
	return fs
}

// batchDigest hashes the batch's content through the one batch reader.
func batchDigest(t *testing.T, r arrow.RecordBatch) string {
	t.Helper()
	h := sha256.New()
	img, err := batch.ImageTensor(r)
	if err != nil {
		t.Fatal(err)
	}
	h.Write(img.Data)
	tg, err := batch.InstancesOf(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tg.BoxesPerImage {
		binary.Write(h, binary.LittleEndian, int64(n))
	}
	binary.Write(h, binary.LittleEndian, tg.Classes)
	binary.Write(h, binary.LittleEndian, tg.Boxes)
	h.Write(tg.IsCrowd)
	h.Write(tg.Masks)
	return hex.EncodeToString(h.Sum(nil))
}

func frozenDir() string { return filepath.Join("..", "..", "testdata", "frozen") }

// TestFrozenReference holds the CPU reference to the newest frozen set.
// With SEGPIPE_FREEZE=<release> (scripts/freeze-reference.sh) it writes
// that release's set instead.
func TestFrozenReference(t *testing.T) {
	if testing.Short() {
		t.Skip("20 training steps and an evaluation: skipped in -short")
	}
	got := computeFrozen(t)
	if rel := os.Getenv("SEGPIPE_FREEZE"); rel != "" {
		got.Release = rel
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(frozenDir(), rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, "reference.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the frozen reference %s", dir)
		return
	}
	b, err := os.ReadFile(filepath.Join(frozenDir(), FrozenReference, "reference.json"))
	if err != nil {
		t.Fatalf("the frozen reference FrozenReference names: %v", err)
	}
	var want frozenSet
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if want.Release != FrozenReference {
		t.Fatalf("frozen set says release %q, FrozenReference %q", want.Release, FrozenReference)
	}
	if !slices.Equal(got.LoaderBatches, want.LoaderBatches) {
		t.Errorf("loader batches changed:\n got %v\nwant %v", got.LoaderBatches, want.LoaderBatches)
	}
	if len(got.LossItems) != len(want.LossItems) {
		t.Fatalf("%d steps, frozen %d", len(got.LossItems), len(want.LossItems))
	}
	for i := range want.LossItems {
		for j, w := range want.LossItems[i] {
			if g := got.LossItems[i][j]; !(math.Abs(g-w) <= frozenLossRTol*math.Abs(w)) {
				t.Errorf("step %d loss item %d: %v, frozen %v (rtol %g)", i, j, g, w, frozenLossRTol)
			}
		}
	}
	if len(got.TopScores) != len(want.TopScores) {
		t.Errorf("%d top scores, frozen %d", len(got.TopScores), len(want.TopScores))
	} else {
		for j, w := range want.TopScores {
			if g := got.TopScores[j]; !(math.Abs(g-w) <= frozenLossRTol*math.Abs(w)) {
				t.Errorf("top score %d: %v, frozen %v (rtol %g)", j, g, w, frozenLossRTol)
			}
		}
	}
	for name, p := range map[string][2][]float64{"box": {got.BoxStats, want.BoxStats}, "mask": {got.MaskStats, want.MaskStats}} {
		if len(p[0]) != len(p[1]) {
			t.Errorf("%d %s numbers, frozen %d", len(p[0]), name, len(p[1]))
			continue
		}
		for j := range p[1] {
			if !(math.Abs(p[0][j]-p[1][j]) <= frozenEvalATol) {
				t.Errorf("%s stat %d: %v, frozen %v (atol %g)", name, j, p[0][j], p[1][j], frozenEvalATol)
			}
		}
	}
}

// The newest frozen set is the one FrozenReference names.
func TestFrozenReferenceIsTheNewest(t *testing.T) {
	ents, err := os.ReadDir(frozenDir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 || slices.MaxFunc(names, compareRelease) != FrozenReference {
		t.Fatalf("frozen sets %v: FrozenReference %q is not the newest", names, FrozenReference)
	}
}

// compareRelease orders release names numerically by dotted component.
func compareRelease(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}
