package cuda

import "testing"

func TestPrecision(t *testing.T) {
	for _, c := range []struct {
		name string
		want Options
		ok   bool
	}{{"fp32", Options{}, true}, {"tf32", Options{ConvTF32: true}, true}, {"", Options{ConvTF32: true}, true}, {"fp16", Options{}, false}} {
		got, err := Precision(c.name)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Precision(%q) = %+v, %v; want %+v, ok %v", c.name, got, err, c.want, c.ok)
		}
	}
}

// TestPickAlgoMath checks the search result's math type is what a TF32
// plan runs, and that strict fp32 never takes a tensor-op entry.
func TestPickAlgoMath(t *testing.T) {
	const tensorOp = 1
	perf := []algoPerf{{algo: 7, math: tensorOp}, {algo: 2, math: dnnFMAMath}}
	if p, ok := pickAlgo(perf, true); !ok || p.algo != 7 || p.math != tensorOp {
		t.Errorf("tf32: picked %+v, want algorithm 7 in tensor-op math", p)
	}
	if p, ok := pickAlgo(perf, false); !ok || p.algo != 2 {
		t.Errorf("fp32: picked %+v, want algorithm 2 (FMA)", p)
	}
}
