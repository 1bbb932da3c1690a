package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.WindowExpander = (*Backend)(nil)

// WindowTable checks the windows as the host expansion does
// (raster.Expand: inside the grid, sizes matching the data) and appends
// their ExpandWindows table entries (AppendWindow), each with its offset
// into the data.
func (be *Backend) WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error) {
	if len(wins)%4 != 0 {
		return dst, fmt.Errorf("cuda backend: %d window values, not 4 per window", len(wins))
	}
	if rows < 0 || cols < 0 {
		return dst, fmt.Errorf("cuda backend: windows on a %dx%d grid", rows, cols)
	}
	off := int64(0)
	for i := 0; i < len(wins); i += 4 {
		x0, y0, w, h := int64(wins[i]), int64(wins[i+1]), int64(wins[i+2]), int64(wins[i+3])
		if x0 < 0 || y0 < 0 || w < 0 || h < 0 || x0+w > int64(cols) || y0+h > int64(rows) {
			return dst, fmt.Errorf("cuda backend: window %d (%d, %d, %d×%d) outside grid %dx%d", i/4, x0, y0, w, h, rows, cols)
		}
		if w*h > int64(dataBytes)-off {
			return dst, fmt.Errorf("cuda backend: window %d needs %d bytes at offset %d, data has %d", i/4, w*h, off, dataBytes)
		}
		dst = AppendWindow(dst, int(x0), int(y0), int(w), int(h), off)
		off += w * h
	}
	if off != int64(dataBytes) {
		return dst, fmt.Errorf("cuda backend: windows use %d bytes, data has %d", off, dataBytes)
	}
	return dst, nil
}

// ExpandWindows runs the expand_windows kernel: one thread per output
// byte, the window's byte inside it, 0 outside.
func (be *Backend) ExpandWindows(n, rows, cols int, table, data, dst backend.Buffer) {
	if 4*table.Len < n*WindowBytes || 4*dst.Len < n*rows*cols {
		panic(fmt.Sprintf("cuda backend: ExpandWindows of %d %dx%d masks: table of %d bytes, dst of %d", n, rows, cols, 4*table.Len, 4*dst.Len))
	}
	orPanic("expand windows", be.k.ExpandWindows(be.ptr(table), be.ptr(data), be.ptr(dst), n, rows, cols))
}
