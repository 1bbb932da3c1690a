package cuda

import (
	"encoding/binary"
	"testing"

	"github.com/segpipe/segpipe/pipeline/raster"
)

// FuzzWindowTable feeds WindowTable windows as a remote server could send
// them: it must refuse exactly what the host expansion refuses, never
// panic, and give one table entry per window otherwise.
func FuzzWindowTable(f *testing.F) {
	f.Add(uint8(4), uint8(5), uint16(6), []byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0})
	f.Add(uint8(3), uint8(3), uint16(0), []byte{})
	f.Add(uint8(2), uint8(2), uint16(4), []byte{255, 255, 255, 255, 0, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, rows, cols uint8, dataBytes uint16, raw []byte) {
		wins := make([]int32, len(raw)/4)
		for i := range wins {
			wins[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		var be Backend
		table, err := be.WindowTable(nil, wins, int(rows), int(cols), int(dataBytes))
		rw := make([]raster.Window, len(wins)/4)
		for i := range rw {
			rw[i] = raster.Window{X0: wins[4*i], Y0: wins[4*i+1], W: wins[4*i+2], H: wins[4*i+3]}
		}
		g := raster.Grid{Rows: int(rows), Cols: int(cols), Stride: 4}
		hostErr := raster.Expand(make([]uint8, len(rw)*g.Cells()), g, rw, make([]uint8, dataBytes))
		if len(wins)%4 != 0 {
			if err == nil {
				t.Fatalf("%d window values accepted", len(wins))
			}
			return
		}
		if (err == nil) != (hostErr == nil) {
			t.Fatalf("WindowTable error %v, host expansion %v", err, hostErr)
		}
		if err == nil && len(table) != len(rw)*WindowBytes {
			t.Fatalf("%d table bytes for %d windows", len(table), len(rw))
		}
	})
}
