package loss

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// FuzzForwardTargets feeds arbitrary targets (counts, classes, boxes, masks
// decoded from the fuzz input) to the criterion: it must either return an
// error or a finite loss, and never panic.
func FuzzForwardTargets(f *testing.F) {
	f.Add([]byte{2, 1, 0, 10, 10, 40, 40, 1, 20, 5, 60, 30})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{3, 0, 2, 255, 0, 0, 1, 1, 9, 200, 200, 7, 7, 7})
	out, _ := randomCase(rand.New(rand.NewPCG(61, 62)), []int{0, 0})
	hw := out.ProtoH * out.ProtoW
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		tg := &Targets{BoxesPerImage: []int{int(next() % 5), int(next() % 5)}}
		if next()%7 == 0 {
			tg.BoxesPerImage[1] = -1
		}
		n := max(tg.BoxesPerImage[0]+tg.BoxesPerImage[1], 0)
		for k := 0; k < n; k++ {
			tg.Classes = append(tg.Classes, int32(next()%5)-1)
			for j := 0; j < 4; j++ {
				v := float32(next()) / 3
				if next()%11 == 0 && len(data) >= 4 {
					v = math.Float32frombits(binary.LittleEndian.Uint32(data))
					data = data[4:]
				}
				tg.Boxes = append(tg.Boxes, v)
			}
			for p := 0; p < hw; p++ {
				tg.Masks = append(tg.Masks, next()&1)
			}
		}
		c, err := NewCriterion(DefaultConfig(3))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Forward(out, tg, out.Grads())
		if err != nil {
			return
		}
		if math.IsNaN(res.Total) || math.IsInf(res.Total, 0) {
			t.Fatalf("non-finite total %v for targets %+v", res.Total, tg)
		}
	})
}
