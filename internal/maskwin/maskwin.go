// Package maskwin is the rule the windows of a windowed mask stack obey
// (the masks=windowed transport: per instance a window x0, y0, w, h on the
// prototype grid and the window's w·h bytes, back to back in instance
// order). The host expansion (pipeline/raster) and a device backend's
// table for its expansion kernel (trainer/tensor/cuda), which indexes
// device memory by these values and so must refuse bad ones itself, both
// check windows with Check; the backend may not import the rasteriser, so
// the rule lives here, with no dependency.
package maskwin

import "fmt"

// Check reports the first of n windows (window(i) gives x0, y0, w, h)
// that lies outside a rows×cols grid or does not fit dataBytes bytes of
// window data (the windows' w·h bytes back to back, in order), and data
// left over. Values are taken as ints, so no product overflows for int32
// inputs.
func Check(rows, cols, n int, window func(i int) (x0, y0, w, h int), dataBytes int) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("windows on a %dx%d grid", rows, cols)
	}
	off := 0
	for i := range n {
		x0, y0, w, h := window(i)
		if w < 0 || h < 0 || x0 < 0 || y0 < 0 || x0 > cols-w || y0 > rows-h {
			return fmt.Errorf("window %d (x0 %d, y0 %d, w %d, h %d) outside grid %dx%d", i, x0, y0, w, h, rows, cols)
		}
		if w*h > dataBytes-off {
			return fmt.Errorf("window %d needs %d bytes at offset %d, data has %d", i, w*h, off, dataBytes)
		}
		off += w * h
	}
	if off != dataBytes {
		return fmt.Errorf("windows use %d bytes, data has %d", off, dataBytes)
	}
	return nil
}
