package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.WindowExpander = (*Backend)(nil)

// WindowTable checks the windows as the host expansion does
// (raster.CheckWindows: inside the grid, sizes matching the data; the
// transport's four int32 per window are raster.Window's layout) and appends
// their ExpandWindows table entries (AppendWindow), each with its offset
// into the data.
func (be *Backend) WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error) {
	ws, err := raster.WindowsOf(wins)
	if err != nil {
		return dst, fmt.Errorf("cuda backend: %w", err)
	}
	if rows < 0 || cols < 0 {
		return dst, fmt.Errorf("cuda backend: windows on a %dx%d grid", rows, cols)
	}
	if err := raster.CheckWindows(rows, cols, ws, dataBytes); err != nil {
		return dst, fmt.Errorf("cuda backend: %w", err)
	}
	off := 0
	for _, w := range ws {
		dst = AppendWindow(dst, int(w.X0), int(w.Y0), int(w.W), int(w.H), int64(off))
		off += w.Size()
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
