package cuda

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestParseAlgoPerfAndPick(t *testing.T) {
	buf := make([]byte, 3*algoPerfSize)
	put := func(i int, algo, status int32, ms float32, mem uint64, math32 int32) {
		r := buf[i*algoPerfSize:]
		binary.LittleEndian.PutUint32(r[0:], uint32(algo))
		binary.LittleEndian.PutUint32(r[4:], uint32(status))
		binary.LittleEndian.PutUint32(r[8:], math.Float32bits(ms))
		binary.LittleEndian.PutUint64(r[16:], mem)
		binary.LittleEndian.PutUint32(r[24:], 1)
		binary.LittleEndian.PutUint32(r[28:], uint32(math32))
	}
	put(0, 6, 0, 0.1, 1<<20, 1) // tensor-op math: fastest
	put(1, 1, 3000, 0.2, 0, 3)  // failed
	put(2, 0, 0, 0.3, 4096, 3)  // fp32 FMA
	perf := parseAlgoPerf(buf, 3)
	if len(perf) != 3 || perf[0].algo != 6 || perf[0].memory != 1<<20 || perf[2].ms != 0.3 || perf[1].status != 3000 {
		t.Fatalf("parsed %+v", perf)
	}
	if p, ok := pickAlgo(perf, true); !ok || p.algo != 6 {
		t.Errorf("with TF32 picked %+v, want algo 6", p)
	}
	if p, ok := pickAlgo(perf, false); !ok || p.algo != 0 {
		t.Errorf("without TF32 picked %+v, want algo 0 (the FMA one)", p)
	}
	if got := parseAlgoPerf(buf[:algoPerfSize], 3); len(got) != 1 {
		t.Errorf("a short buffer must bound the count, got %d entries", len(got))
	}
}

func TestConvAndPoolSizes(t *testing.T) {
	c := convShape{N: 1, InC: 3, InH: 640, InW: 640, OutC: 16, KH: 3, KW: 3, Stride: 2, Pad: 1}
	if c.OutH() != 320 || c.OutW() != 320 {
		t.Errorf("conv out %dx%d", c.OutH(), c.OutW())
	}
	p := poolShape{N: 1, C: 1, H: 20, W: 20, K: 5, Stride: 1, Pad: 2}
	if p.OutH() != 20 || p.OutW() != 20 {
		t.Errorf("pool out %dx%d", p.OutH(), p.OutW())
	}
}
