package train

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/segpipe/segpipe/formats/batch"
	"github.com/segpipe/segpipe/internal/testenv/batchfault"
	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// windowingEmu is stagingEmu with a backend.WindowExpander: the table is
// each window's four values and its data offset as int32 (checked by
// raster.CheckWindows, as the cuda backend's is), and ExpandWindows runs
// raster.Expand on the device's memory. It counts the expansions and the
// allocations of the dense stack's size.
type windowingEmu struct {
	stagingEmu
	expands int
}

var _ backend.WindowExpander = (*windowingEmu)(nil)

func (e *windowingEmu) WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error) {
	ws, err := raster.WindowsOf(wins)
	if err != nil {
		return dst, err
	}
	if err := raster.CheckWindows(rows, cols, ws, dataBytes); err != nil {
		return dst, err
	}
	off := 0
	for _, w := range ws {
		for _, v := range []int32{w.X0, w.Y0, w.W, w.H, int32(off)} {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
		}
		off += w.Size()
	}
	return dst, nil
}

func (e *windowingEmu) ExpandWindows(n, rows, cols int, table, data, dst backend.Buffer) {
	e.expands++
	e.RunHost(func(v backend.View) {
		tv := v.Int32(table)
		var wins []raster.Window
		size := 0
		for k := range n {
			w := raster.Window{X0: tv[5*k], Y0: tv[5*k+1], W: tv[5*k+2], H: tv[5*k+3]}
			if int(tv[5*k+4]) != size {
				e.t.Errorf("window %d: table offset %d, want %d", k, tv[5*k+4], size)
			}
			wins, size = append(wins, w), size+w.Size()
		}
		g := raster.Grid{Rows: rows, Cols: cols, Stride: 1}
		if err := raster.Expand(v.Bytes(dst)[:n*rows*cols], g, wins, v.Bytes(data)[:size]); err != nil {
			e.t.Errorf("device expansion of checked windows: %v", err)
		}
	})
}

// windowedForm is batchfault.Windowed, failing t on an error.
func windowedForm(t *testing.T, rec arrow.RecordBatch, bad string) arrow.RecordBatch {
	t.Helper()
	win, err := batchfault.Windowed(rec, bad)
	if err != nil {
		t.Fatal(err)
	}
	return win
}

// TestWindowedStepsLikeDense: training steps on windowed batches give the
// dense batches' losses to the bit — on a backend that expands windows
// (the window table and bytes staged in place of the stack, seven
// uploads whose bytes are the dense ones less the stack plus the table and
// the window bytes, one expansion a batch into a stack reused while large
// enough; none for a batch without instances) and on emu without it (expanded on the host: the dense batch's
// six uploads and bytes).
func TestWindowedStepsLikeDense(t *testing.T) {
	shards, _, _ := synthShards(t, 8)
	src, cats := open(t, shards)
	type run struct {
		losses [][loss.NumComponents]float64
		moved  []backend.Transfers
	}
	const steps = 5
	kinds := []string{"dense", "windowed on a window expander", "windowed on emu"}
	runs := make([]run, len(kinds))
	var extra []int64 // per step: table + window bytes − stack bytes
	var grown, withInstances int
	we := &windowingEmu{stagingEmu: stagingEmu{Backend: cpu.NewEmulated(), t: t}}
	if !ExpandsWindows(deviceOf(we)) {
		t.Fatal("ExpandsWindows is false for a staging window expander")
	}
	var stack backend.Buffer
	for k, be := range []backend.Backend{&stagingEmu{Backend: cpu.NewEmulated(), t: t}, we, cpu.NewEmulated()} {
		var each func(int, *trainer, arrow.RecordBatch) arrow.RecordBatch
		var after func(*gradSet)
		if k > 0 {
			each = func(_ int, _ *trainer, rec arrow.RecordBatch) arrow.RecordBatch {
				defer rec.Release()
				win := windowedForm(t, rec, "")
				if k == 1 {
					mw, err := batch.MaskWindowsOf(win)
					if err != nil {
						t.Fatal(err)
					}
					ms, _ := batch.MaskStack(rec)
					extra = append(extra, int64(20*mw.Count()+len(mw.Data)-len(ms.Data)))
					if mw.Count() > 0 {
						withInstances++
					}
				}
				return win
			}
		}
		if k == 1 {
			after = func(gs *gradSet) {
				if gs.batch.masks != stack {
					grown++
					stack = gs.batch.masks
				}
			}
		}
		var gs *gradSet
		runs[k].losses, runs[k].moved, gs = trainSteps(t, src, cats, be, steps, each, after)
		if gs.batch.masks.Present() {
			t.Errorf("%s: the device stack is held after release", kinds[k])
		}
	}
	for k := 1; k < len(kinds); k++ {
		for i := range steps {
			if runs[k].losses[i] != runs[0].losses[i] {
				t.Errorf("%s, iteration %d: loss %v, dense %v", kinds[k], i, runs[k].losses[i], runs[0].losses[i])
			}
		}
	}
	for i := range steps {
		d, w, h := runs[0].moved[i], runs[1].moved[i], runs[2].moved[i]
		if w.Uploads != 7 || w.UploadBytes != d.UploadBytes+extra[i] || w.Downloads != d.Downloads {
			t.Errorf("iteration %d: windowed moved %+v, dense %+v: want 7 uploads of the dense bytes %+d", i, w, d, extra[i])
		}
		if h != d {
			t.Errorf("iteration %d: windowed on emu moved %+v, dense %+v", i, h, d)
		}
	}
	if we.expands != withInstances || grown < 1 || grown > steps {
		t.Errorf("%d expansions for %d batches with instances, the stack allocated %d times in %d steps", we.expands, withInstances, grown, steps)
	}
	t.Logf("per iteration: dense %+v, windowed %+v; the stack allocated %d times in %d steps", runs[0].moved[0], runs[1].moved[0], grown, steps)
}

// TestWindowedBatchRefused: a windowed batch with a window outside the
// grid or data a byte short fails the upload with an error, on cpu, emu
// and a window expander alike, and queues nothing on the expander.
func TestWindowedBatchRefused(t *testing.T) {
	shards, _, _ := synthShards(t, 4)
	src, cats := open(t, shards)
	var rec arrow.RecordBatch // the first batch with instances
	trainSteps(t, src, cats, cpu.NewEmulated(), 4, func(_ int, _ *trainer, r arrow.RecordBatch) arrow.RecordBatch {
		if ms, err := batch.MaskStack(r); err == nil && ms.Count > 0 && rec == nil {
			r.Retain()
			rec = r
		}
		return r
	}, nil)
	if rec == nil {
		t.Fatal("no batch with instances")
	}
	defer rec.Release()
	for _, bad := range []struct{ name, want string }{{"window", "outside grid"}, {"data", "data has"}} {
		win := windowedForm(t, rec, bad.name)
		for _, dev := range []string{"cpu", "emu", "expander"} {
			var be backend.Backend
			switch dev {
			case "cpu":
				be = cpu.Default()
			case "emu":
				be = cpu.NewEmulated()
			case "expander":
				be = &windowingEmu{stagingEmu: stagingEmu{Backend: cpu.NewEmulated(), t: t}}
			}
			var db deviceBatch
			d := deviceOf(be)
			_, _, err := db.upload(d, win)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%s, bad %s: upload error %v, want one saying %q", dev, bad.name, err, bad.want)
			}
			if we, ok := be.(*windowingEmu); ok && (we.expands != 0 || we.stages != 0) {
				t.Errorf("%s, bad %s: %d stages and %d expansions queued for a refused batch", dev, bad.name, we.stages, we.expands)
			}
			db.release(d)
		}
		win.Release()
	}
}
