package batch

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Windowed returns the windowed form of the dense batch record rec, as
// `segpipe serve` sends it: its first nine columns unchanged, and per
// instance the tight window of its ON cells and the window's bytes (see
// WindowedSchema). schema is WindowedSchema of rec's schema on its mask
// grid (made once per stream); every buffer the result adds to rec's (the
// windows, the data offsets and the data) comes from mem. The caller still
// owns rec and owns one reference to the result.
func Windowed(schema *arrow.Schema, rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	st, err := MaskStack(rec)
	if err != nil {
		return nil, err
	}
	if len(st.Shape) != 2 {
		return nil, fmt.Errorf("batch: masks have shape %v, want [Hp, Wp]", st.Shape)
	}
	hp, wp := st.Shape[0], st.Shape[1]
	n, sumN, cells := int(rec.NumRows()), st.Count, hp*wp
	if len(st.Data) != sumN*cells || len(st.Offsets) != n+1 {
		return nil, fmt.Errorf("batch: mask stack of %d bytes for %d masks of %dx%d", len(st.Data), sumN, hp, wp)
	}
	wins := memory.NewResizableBuffer(mem)
	wins.Resize(16 * sumN)
	defer wins.Release()
	offs := memory.NewResizableBuffer(mem)
	offs.Resize(4 * (n + 1))
	defer offs.Release()
	wv := arrow.Int32Traits.CastFromBytes(wins.Bytes())
	ov := arrow.Int32Traits.CastFromBytes(offs.Bytes())
	// The windows first, then the data in one buffer of their total size,
	// so that every byte of the result comes from mem.
	size := 0
	img := 0
	ov[0] = 0
	for k := 0; k < sumN; k++ {
		for img < n && int(st.Offsets[img+1]) <= k {
			img++
			ov[img] = int32(size)
		}
		x0, y0, ww, hh := tightWindow(st.Data[k*cells:(k+1)*cells], hp, wp)
		wv[4*k], wv[4*k+1], wv[4*k+2], wv[4*k+3] = int32(x0), int32(y0), int32(ww), int32(hh)
		size += ww * hh
	}
	for img < n {
		img++
		ov[img] = int32(size)
	}
	if size == 0 {
		return windowedOf(schema, rec, wins, offs, nil)
	}
	data := memory.NewResizableBuffer(mem)
	data.Resize(size)
	defer data.Release()
	d, at := data.Bytes(), 0
	for k := 0; k < sumN; k++ {
		x0, y0, ww, hh := int(wv[4*k]), int(wv[4*k+1]), int(wv[4*k+2]), int(wv[4*k+3])
		for r := y0; r < y0+hh; r++ {
			o := k*cells + r*wp + x0
			at += copy(d[at:], st.Data[o:o+ww])
		}
	}
	return windowedOf(schema, rec, wins, offs, data)
}

// tightWindow returns the smallest block holding every non-zero cell of a
// rows×cols plane; (0,0,0,0) when there is none.
func tightWindow(p []byte, rows, cols int) (x0, y0, w, h int) {
	y0 = -1
	for r := 0; r < rows; r++ {
		if anyNonZero(p[r*cols : (r+1)*cols]) {
			y0 = r
			break
		}
	}
	if y0 < 0 {
		return 0, 0, 0, 0
	}
	y1 := y0
	for r := rows - 1; r > y0; r-- {
		if anyNonZero(p[r*cols : (r+1)*cols]) {
			y1 = r
			break
		}
	}
	lo, hi := cols, -1
	for r := y0; r <= y1; r++ {
		row := p[r*cols : (r+1)*cols]
		for c := 0; c < lo; c++ {
			if row[c] != 0 {
				lo = c
				break
			}
		}
		for c := cols - 1; c > hi; c-- {
			if row[c] != 0 {
				hi = c
				break
			}
		}
	}
	return lo, y0, hi - lo + 1, y1 - y0 + 1
}

func anyNonZero(b []byte) bool {
	for len(b) >= 32 {
		if binary.LittleEndian.Uint64(b)|binary.LittleEndian.Uint64(b[8:])|
			binary.LittleEndian.Uint64(b[16:])|binary.LittleEndian.Uint64(b[24:]) != 0 {
			return true
		}
		b = b[32:]
	}
	for _, v := range b {
		if v != 0 {
			return true
		}
	}
	return false
}
