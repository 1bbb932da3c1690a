// Package batchfault damages batch records the ways a faulty or hostile
// server could send them, for tests of the readers that must refuse them.
package batchfault

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/segpipe/segpipe/formats/batch"
)

// Windowed returns the windowed form of the dense batch record rec, as a
// server sends it (batch.Windowed), damaged as fault says: "" not at all;
// "window" moves the first non-empty window one cell past the grid's right
// edge; "data" leaves the last byte of the window data out of the images'
// data. The caller still owns rec and owns one reference to the result.
func Windowed(rec arrow.RecordBatch, fault string) (arrow.RecordBatch, error) {
	ms, err := batch.MaskStack(rec)
	if err != nil {
		return nil, err
	}
	win, err := batch.Windowed(batch.WindowedSchema(rec.Schema(), ms.Shape[0], ms.Shape[1]), rec, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	mw, err := batch.MaskWindowsOf(win)
	if err != nil {
		win.Release()
		return nil, err
	}
	switch fault {
	case "":
	case "window":
		for k := 0; k+3 < len(mw.Windows); k += 4 {
			if mw.Windows[k+2] > 0 {
				mw.Windows[k] = int32(mw.Cols) - mw.Windows[k+2] + 1
				break
			}
		}
	case "data":
		offs := arrow.Int32Traits.CastFromBytes(win.Column(win.Schema().FieldIndices(batch.ColMaskData)[0]).Data().Buffers()[1].Bytes())
		last := offs[len(offs)-1] - 1
		for i := range offs {
			offs[i] = min(offs[i], last)
		}
	default:
		win.Release()
		return nil, fmt.Errorf("batchfault: unknown fault %q", fault)
	}
	return win, nil
}
