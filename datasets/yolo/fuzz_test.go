package yolo

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/segpipe/segpipe/datasets"
	"github.com/segpipe/segpipe/datasets/internal/arena"
	"github.com/segpipe/segpipe/formats/shard"
)

// FuzzParseLabels feeds arbitrary label files to the line parser: no
// panic, every non-blank line either kept or counted, and kept instances
// well formed.
//
//	go test -run '^$' -fuzz FuzzParseLabels -fuzztime 3m -parallel 1 ./datasets/yolo
func FuzzParseLabels(f *testing.F) {
	f.Add([]byte("0 0.1 0.1 0.9 0.1 0.5 0.9\n2 0.5 0.5 0.25 0.5\n"), uint16(640), uint16(480))
	f.Add([]byte("0 nan 1 2\n1\n\n0 0.1 0.2 0.3\r\n7 1e400 0 0 0 0 0"), uint16(1), uint16(1))
	f.Add([]byte("0.5 1 1 1 1\n-1 0 0 1 1\n0 0x1p-2 0 1 0 1 1"), uint16(3), uint16(0))
	// Issue 35: one line past shard.MaxInstances, and a blank-padded file.
	f.Add(bytes.Repeat([]byte("0 0.5 0.5 0.1 0.1\n"), shard.MaxInstances+1), uint16(64), uint16(64))
	f.Add(append(bytes.Repeat([]byte("\n \n"), 5000), "0 0.1 0.1 0.9 0.1 0.5 0.9\n"...), uint16(8), uint16(8))
	f.Fuzz(func(t *testing.T, data []byte, w, h uint16) {
		var st arena.Store
		rep := &datasets.Report{Logger: quiet}
		classOf := map[int32]int32{0: 0, 2: 1}
		lines, err := parseLabels("x.txt", data, int32(w), int32(h), 1, classOf, &st, func(p *datasets.Problem) error {
			return rep.Handle(false, p)
		})
		if errors.Is(err, errTooManyInstances) {
			if len(st.Anns) != shard.MaxInstances {
				t.Fatalf("stopped with %d instances stored, want %d", len(st.Anns), shard.MaxInstances)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Anns) > shard.MaxInstances {
			t.Fatalf("%d instances kept", len(st.Anns))
		}
		if int64(lines) != int64(len(st.Anns))+rep.Total() {
			t.Fatalf("%d lines, %d kept + %d skipped", lines, len(st.Anns), rep.Total())
		}
		for _, a := range st.Anns {
			if a.RingHi != a.RingLo+1 {
				t.Fatalf("instance with %d rings", a.RingHi-a.RingLo)
			}
			ring := st.Ring(a.RingLo)
			if len(ring) < 6 || len(ring)%2 != 0 {
				t.Fatalf("ring of %d values", len(ring))
			}
			for _, v := range append(ring, a.BBox[:]...) {
				if math.IsNaN(float64(v)) {
					t.Fatalf("NaN kept: %v %v", ring, a.BBox)
				}
			}
			if a.Class != classOf[a.CategoryID] {
				t.Fatalf("class %d for category %d", a.Class, a.CategoryID)
			}
		}
		// Strict: the first problem is returned, as a Problem.
		var st2 arena.Store
		_, err = parseLabels("x.txt", data, int32(w), int32(h), 1, classOf, &st2, func(p *datasets.Problem) error { return p })
		if (err != nil) != (rep.Total() > 0) || err != nil && !errors.Is(err, datasets.ErrBadInput) {
			t.Fatalf("strict error %v with %d problems", err, rep.Total())
		}
	})
}
