package cuda

import (
	"fmt"

	"github.com/segpipe/segpipe/internal/maskwin"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.WindowExpander = (*Backend)(nil)

// WindowTable checks the windows (x0, y0, w, h per mask, as the transport
// sends them) and appends their ExpandWindows table entries
// (AppendWindow), each with its offset into the data. A kernel cannot
// return an error, so a backend that indexes device memory by these
// values has to refuse bad ones itself, whatever its caller has checked:
// with the host expansion's rule (internal/maskwin, which
// pipeline/raster's CheckWindows uses), as this package may not import
// the rasteriser.
func (be *Backend) WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error) {
	if len(wins)%4 != 0 {
		return dst, fmt.Errorf("cuda backend: %d window values, not 4 per window", len(wins))
	}
	win := func(i int) (x0, y0, w, h int) {
		return int(wins[4*i]), int(wins[4*i+1]), int(wins[4*i+2]), int(wins[4*i+3])
	}
	if err := maskwin.Check(rows, cols, len(wins)/4, win, dataBytes); err != nil {
		return dst, fmt.Errorf("cuda backend: %w", err)
	}
	off := 0
	for i := range len(wins) / 4 {
		x0, y0, w, h := win(i)
		dst = appendWindow(dst, x0, y0, w, h, int64(off))
		off += w * h
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
