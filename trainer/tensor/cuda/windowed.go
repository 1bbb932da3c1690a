package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.WindowExpander = (*Backend)(nil)

// WindowTable checks the windows (x0, y0, w, h per mask, as the transport
// sends them) and appends their ExpandWindows table entries
// (AppendWindow), each with its offset into the data. The check is the
// expand_windows kernel's own bounds: a window inside the rows×cols grid,
// the windows' w·h bytes exactly filling the data. A kernel cannot return
// an error, so a backend that indexes device memory by these values has to
// refuse bad ones itself, whatever its caller has checked; the rule is the
// host expansion's (pipeline/raster's CheckWindows), which FuzzWindowTable
// holds it to without this package importing the rasteriser.
func (be *Backend) WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error) {
	if len(wins)%4 != 0 {
		return dst, fmt.Errorf("cuda backend: %d window values, not 4 per window", len(wins))
	}
	if rows < 0 || cols < 0 {
		return dst, fmt.Errorf("cuda backend: windows on a %dx%d grid", rows, cols)
	}
	start, off := len(dst), 0
	for i := 0; i < len(wins); i += 4 {
		x0, y0, w, h := int(wins[i]), int(wins[i+1]), int(wins[i+2]), int(wins[i+3])
		if w < 0 || h < 0 || x0 < 0 || y0 < 0 || x0+w > cols || y0+h > rows {
			return dst[:start], fmt.Errorf("cuda backend: window %d (x0 %d, y0 %d, w %d, h %d) outside grid %dx%d",
				i/4, x0, y0, w, h, rows, cols)
		}
		if w*h > dataBytes-off {
			return dst[:start], fmt.Errorf("cuda backend: window %d needs %d bytes at offset %d, data has %d", i/4, w*h, off, dataBytes)
		}
		dst = AppendWindow(dst, x0, y0, w, h, int64(off))
		off += w * h
	}
	if off != dataBytes {
		return dst[:start], fmt.Errorf("cuda backend: windows use %d bytes, data has %d", off, dataBytes)
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
