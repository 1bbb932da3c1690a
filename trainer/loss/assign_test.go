package loss

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refAssign is a brute-force per-image assigner written straight from the
// spec: sort-based top-k, explicit loops, no shared buffers. It is the
// oracle for the batched Assigner and the baseline of its benchmark.
func refAssign(cfg AssignerConfig, in *AssignInput) (fg []bool, gtIdx []int32, score []float32) {
	B, A, M, NC := in.B, in.A, in.M, in.NC
	fg, gtIdx, score = make([]bool, B*A), make([]int32, B*A), make([]float32, B*A)
	for b := 0; b < B; b++ {
		met := make([][]float32, M)
		ovl := make([][]float32, M)
		pos := make([][]bool, M)
		cand := make([][]bool, M)
		for m := 0; m < M; m++ {
			met[m], ovl[m], pos[m], cand[m] = make([]float32, A), make([]float32, A), make([]bool, A), make([]bool, A)
			if !in.MaskGT[b*M+m] {
				continue
			}
			g := in.GTBoxes[(b*M+m)*4:]
			cx, cy, w, h := (g[0]+g[2])/2, (g[1]+g[3])/2, g[2]-g[0], g[3]-g[1]
			if float64(w) < cfg.SmallSide {
				w = float32(cfg.SmallSideTo)
			}
			if float64(h) < cfg.SmallSide {
				h = float32(cfg.SmallSideTo)
			}
			for a := 0; a < A; a++ {
				ax, ay := in.Anchors[2*a], in.Anchors[2*a+1]
				if min(ax-(cx-w/2), ay-(cy-h/2), cx+w/2-ax, cy+h/2-ay) <= 1e-9 {
					continue
				}
				cand[m][a] = true
				p := in.PdBoxes[(b*A+a)*4:]
				ovl[m][a] = max(ciou32([4]float32{g[0], g[1], g[2], g[3]}, [4]float32{p[0], p[1], p[2], p[3]}), 0)
				s := in.PdScores[(b*NC+int(in.GTLabels[b*M+m]))*A+a]
				met[m][a] = float32(math.Pow(float64(s), cfg.Alpha)) * float32(math.Pow(float64(ovl[m][a]), cfg.Beta))
			}
			order := make([]int, A)
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(i, j int) bool { return met[m][order[i]] > met[m][order[j]] })
			for _, a := range order[:min(cfg.TopK, A)] {
				pos[m][a] = cand[m][a]
			}
		}
		for a := 0; a < A; a++ {
			n, best := 0, 0
			for m := 0; m < M; m++ {
				if pos[m][a] {
					n++
				}
				if ovl[m][a] > ovl[best][a] {
					best = m
				}
			}
			if n > 1 {
				for m := 0; m < M; m++ {
					pos[m][a] = m == best
				}
			}
		}
		if cfg.TopK2 > 0 && cfg.TopK2 != cfg.TopK {
			for m := 0; m < M; m++ {
				// Top-k2 of the masked metric over all anchors, as the
				// reference computes it: a positive whose metric is 0 can
				// lose to a non-positive anchor of lower index.
				masked := make([]float32, A)
				order := make([]int, A)
				for a := 0; a < A; a++ {
					order[a] = a
					if pos[m][a] {
						masked[a] = met[m][a]
					}
				}
				sort.SliceStable(order, func(i, j int) bool { return masked[order[i]] > masked[order[j]] })
				for _, a := range order[min(cfg.TopK2, A):] {
					pos[m][a] = false
				}
			}
		}
		for a := 0; a < A; a++ {
			for m := 0; m < M; m++ {
				if !pos[m][a] {
					continue
				}
				fg[b*A+a], gtIdx[b*A+a] = true, int32(m)
				var mm, mo float64
				for x := 0; x < A; x++ {
					if pos[m][x] {
						mm, mo = max(mm, float64(met[m][x])), max(mo, float64(ovl[m][x]))
					}
				}
				score[b*A+a] = float32(float64(float32(float64(met[m][a])*mo)) / float64(float32(mm+1e-9)))
			}
		}
	}
	return fg, gtIdx, score
}

// randomAssignInput builds a batch of B images with random GT counts
// (padding slots included), predictions jittered around random GTs so that
// many anchors compete, and a 64×64 input with strides 8/16/32.
func randomAssignInput(rng *rand.Rand, B, maxGT int, imgsz int) *AssignInput {
	g := Geometry{B: B, NC: 5, NM: 1, Levels: []Level{{imgsz / 8, imgsz / 8, 8}, {imgsz / 16, imgsz / 16, 16}, {imgsz / 32, imgsz / 32, 32}}, ProtoH: 1, ProtoW: 1, SemH: 1, SemW: 1}
	A := g.Anchors()
	pts, st := make([]float32, 2*A), make([]float32, A)
	g.anchorGrid(pts, st)
	anchors := make([]float32, 2*A)
	for a := range st {
		anchors[2*a], anchors[2*a+1] = pts[2*a]*st[a], pts[2*a+1]*st[a]
	}
	counts := make([]int, B)
	M := 0
	for b := range counts {
		counts[b] = rng.IntN(maxGT + 1)
		M = max(M, counts[b])
	}
	in := &AssignInput{B: B, A: A, NC: g.NC, M: M, Anchors: anchors,
		PdScores: make([]float32, B*g.NC*A), PdBoxes: make([]float32, B*A*4),
		GTLabels: make([]int32, B*M), GTBoxes: make([]float32, B*M*4), MaskGT: make([]bool, B*M)}
	S := float32(imgsz)
	for b := 0; b < B; b++ {
		for m := 0; m < counts[b]; m++ {
			w, h := 2+rng.Float32()*S/2, 2+rng.Float32()*S/2
			x, y := rng.Float32()*(S-w), rng.Float32()*(S-h)
			copy(in.GTBoxes[(b*M+m)*4:], []float32{x, y, x + w, y + h})
			in.GTLabels[b*M+m] = int32(rng.IntN(g.NC))
			in.MaskGT[b*M+m] = true
		}
		for a := 0; a < A; a++ {
			cx, cy := anchors[2*a], anchors[2*a+1]
			w, h := 4+rng.Float32()*S/3, 4+rng.Float32()*S/3
			copy(in.PdBoxes[(b*A+a)*4:], []float32{cx - w/2, cy - h/2, cx + w/2, cy + h/2})
		}
	}
	for i := range in.PdScores {
		in.PdScores[i] = rng.Float32()
	}
	return in
}

func TestAssignerMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 40; trial++ {
		in := randomAssignInput(rng, 1+rng.IntN(4), 6, 64)
		for _, cfg := range []AssignerConfig{One2ManyAssigner(), One2OneAssigner()} {
			as, _ := NewAssigner(cfg)
			r, err := as.Assign(in)
			if err != nil {
				t.Fatal(err)
			}
			fg, gi, sc := refAssign(cfg, in)
			for i := range fg {
				if fg[i] != r.FG[i] || (fg[i] && gi[i] != r.GTIdx[i]) {
					t.Fatalf("trial %d topk %d anchor %d: fg/gt %v/%d, brute force %v/%d", trial, cfg.TopK, i, r.FG[i], r.GTIdx[i], fg[i], gi[i])
				}
				if math.Abs(float64(sc[i]-r.ScoreValue[i])) > 1e-6 {
					t.Fatalf("trial %d anchor %d: score %v, brute force %v", trial, i, r.ScoreValue[i], sc[i])
				}
			}
		}
	}
}

// TestAssignerInvariants checks properties that hold for any input: each
// anchor has at most one GT; positives are candidates of valid GTs; with
// the one-to-one settings each GT keeps at most one anchor; padding slots
// never receive an anchor.
func TestAssignerInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 30; trial++ {
		in := randomAssignInput(rng, 3, 8, 64)
		for _, cfg := range []AssignerConfig{One2ManyAssigner(), One2OneAssigner()} {
			as, _ := NewAssigner(cfg)
			r, err := as.Assign(in)
			if err != nil {
				t.Fatal(err)
			}
			B, A, M := in.B, in.A, in.M
			nfg := 0
			for b := 0; b < B; b++ {
				for a := 0; a < A; a++ {
					n := 0
					for m := 0; m < M; m++ {
						i := (b*M+m)*A + a
						if r.MaskPos[i] {
							n++
							if !r.MaskInGTs[i] || !in.MaskGT[b*M+m] {
								t.Fatalf("trial %d: positive (%d,%d,%d) is not a candidate of a valid GT", trial, b, m, a)
							}
						}
					}
					if n > 1 {
						t.Fatalf("trial %d: anchor (%d,%d) has %d GTs", trial, b, a, n)
					}
					if (n == 1) != r.FG[b*A+a] {
						t.Fatalf("trial %d: fg disagrees with mask_pos at (%d,%d)", trial, b, a)
					}
					if r.FG[b*A+a] {
						nfg++
						if s := r.ScoreValue[b*A+a]; s < 0 || s > 1 {
							t.Fatalf("trial %d: target score %v outside [0,1]", trial, s)
						}
					}
				}
				if cfg.TopK2 == 1 {
					for m := 0; m < M; m++ {
						n := 0
						for a := 0; a < A; a++ {
							if r.MaskPos[(b*M+m)*A+a] {
								n++
							}
						}
						if n > 1 {
							t.Fatalf("trial %d: one2one GT (%d,%d) has %d anchors", trial, b, m, n)
						}
					}
				}
			}
			if nfg != r.NumFG {
				t.Fatalf("NumFG %d, counted %d", r.NumFG, nfg)
			}
		}
	}
}

func TestAssignerSTALGivesSmallBoxesCandidates(t *testing.T) {
	// A 4×4 px GT between anchor centres has no candidate without STAL.
	in := randomAssignInput(rand.New(rand.NewPCG(5, 6)), 1, 0, 64)
	in.M = 1
	in.GTBoxes = []float32{29, 29, 33, 33}
	in.GTLabels = []int32{0}
	in.MaskGT = []bool{true}
	for _, stal := range []bool{false, true} {
		cfg := One2ManyAssigner()
		if !stal {
			cfg.SmallSide = 0
		}
		as, _ := NewAssigner(cfg)
		r, err := as.Assign(in)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range r.MaskInGTs {
			if c {
				n++
			}
		}
		if stal && n == 0 || !stal && n != 0 {
			t.Errorf("STAL %v: %d candidates", stal, n)
		}
	}
}

func TestAssignerRejectsBadInput(t *testing.T) {
	in := randomAssignInput(rand.New(rand.NewPCG(7, 8)), 2, 3, 64)
	in.M = 1
	in.GTBoxes = make([]float32, 8)
	in.GTLabels = []int32{0, 9}
	in.MaskGT = []bool{true, true}
	as, _ := NewAssigner(One2ManyAssigner())
	if _, err := as.Assign(in); err == nil {
		t.Error("class 9 of 5 accepted")
	}
	in.GTLabels = []int32{0, 1}
	in.PdBoxes = in.PdBoxes[:4]
	if _, err := as.Assign(in); err == nil {
		t.Error("short pd_bboxes accepted")
	}
	if _, err := NewAssigner(AssignerConfig{}); err == nil {
		t.Error("topk 0 accepted")
	}
}

func TestTopKOrder(t *testing.T) {
	v := []float32{0, 3, 1, 3, 0, 7, 2}
	got := topK(v, 4, nil)
	want := []int32{5, 1, 3, 6}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("topK = %v, want %v", got, want)
		}
	}
}
