package cuda

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// stagedBatch is a batch's six parts as the train batch path stages them:
// uint8 images, int32 boxes_per_image and classes, float32 boxes, and the
// iscrowd and mask bytes.
func stagedBatch(rng *rand.Rand, images, px, instances int, crowd bool) [][]byte {
	fill := func(n, mod int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(mod))
		}
		return b
	}
	var boxes []float32
	for range 4 * instances {
		boxes = append(boxes, rng.Float32()*float32(px))
	}
	var flags []byte
	if crowd {
		flags = fill(instances, 2)
	}
	return [][]byte{fill(images*3*px*px, 256), toBytes(make([]int32, images)), fill(4*instances, 80),
		toBytes(boxes), flags, fill(instances*(px/4)*(px/4), 2)}
}

// TestStagingOnHarness: batches of growing, shrinking and empty sizes go
// up through the Backend's Stager as they would through UploadBytes — the
// same bytes on the device, the images widened to the same floats bit for
// bit, the same uploads and bytes counted — and the copy of batch i+2
// waits on the device for the event recorded right after the step of
// batch i, in the slot batch i used.
func TestStagingOnHarness(t *testing.T) {
	be, e := newHarnessBackend(t)
	rng := rand.New(rand.NewPCG(5, 8))
	shapes := []struct{ images, px, instances int }{{2, 8, 3}, {3, 16, 9}, {1, 4, 0}, {4, 20, 5}, {2, 8, 1}, {2, 12, 7}}
	liveBefore := len(e.live)
	type batchMarks struct {
		stepEnd int // launches once the batch's step is queued
		copyAt  int // index of its copy in the trace
	}
	var marks []batchMarks
	for i, sh := range shapes {
		parts := stagedBatch(rng, sh.images, sh.px, sh.instances, i != 2)
		var stepEnd int
		bufs := stageStep(t, be, i, parts, func() {
			c := lastOp(e.stage, "copy")
			if c < 0 || (i > 0 && c <= marks[i-1].copyAt) {
				t.Fatalf("batch %d: Stage queued no copy", i)
			}
			marks = append(marks, batchMarks{copyAt: c})
		}, func() { stepEnd = e.launches })
		marks[i].stepEnd = stepEnd
		// A staged buffer is the Stager's: Free leaves it alone.
		live := len(e.live)
		be.Free(backend.Buffer{Mem: bufs[0].Mem, Len: bufs[0].Mem.Elems()})
		if len(e.live) != live {
			t.Fatalf("Free of a staged slot freed it")
		}
	}
	// The overlap structure: batches 0 and 1 fill fresh slots; batch i
	// ≥ 2 refills batch i−2's slot, its copies first waiting on the
	// device for the event recorded when batch i−2's step was queued —
	// after that step's last launch, before batch i−1's first.
	for i, m := range marks {
		c := e.stage[m.copyAt]
		if i < 2 {
			if c.after != 0 {
				t.Errorf("batch %d: a fresh slot's copy waits for event %d", i, c.after)
			}
			continue
		}
		if c.after == 0 {
			t.Errorf("batch %d: its copy waits for nothing; want the end of batch %d's step", i, i-2)
			continue
		}
		rec := -1
		for j := marks[i-2].copyAt; j < m.copyAt; j++ {
			if tr := e.stage[j]; tr.op == "record" && tr.event == c.after {
				rec = j
			}
		}
		if rec < 0 {
			t.Errorf("batch %d: its copy waits for event %d, which batch %d's step never recorded", i, c.after, i-2)
			continue
		}
		if l := e.stage[rec].launches; l != marks[i-2].stepEnd {
			t.Errorf("batch %d: waits for an event recorded after %d launches; batch %d's step ended at %d", i, l, i-2, marks[i-2].stepEnd)
		}
		if rec > marks[i-1].copyAt {
			t.Errorf("batch %d: batch %d's step was marked done only after batch %d was staged", i, i-2, i-1)
		}
		// The host never waited for the compute stream: only for the
		// slot's own earlier copies, for the start of a step queued
		// before the previous batch was staged (long past on the device,
		// read for the idle time), and in slot growth, which syncs.
		for j := marks[i-1].copyAt + 1; j < m.copyAt; j++ {
			tr := e.stage[j]
			if tr.op != "wait" || tr.event == e.stage[marks[i-2].copyAt].event {
				continue
			}
			if r := lastRecord(e.stage[:j], tr.event); r < 0 || r > marks[i-1].copyAt {
				t.Errorf("batch %d: the host waited for event %d, recorded at %d, after batch %d was staged", i, tr.event, r, i-1)
			}
		}
	}
	t.Logf("%d batches staged: trace of %d entries, %d slot syncs", len(shapes), len(e.stage), countOps(e.stage, "sync"))
	// FreeStaged returns both slots (and counts the last gaps); staging
	// again opens them afresh.
	be.FreeStaged()
	// The idle time: one gap between each two consecutive batches, from
	// the end event of one's step to the start event of the next's work
	// (one copy between the two records), summed.
	var gaps int
	var want time.Duration
	for j, tr := range e.stage {
		if tr.op != "elapsed" {
			continue
		}
		a, b := lastRecord(e.stage[:j], tr.after), lastRecord(e.stage[:j], tr.event)
		if a < 0 || b <= a || countOps(e.stage[a:b], "copy") != 1 {
			t.Errorf("idle gap %d: from the record at %d to the one at %d, which are not the end of one batch's step and the start of the next's", gaps, a, b)
		}
		gaps++
		want += time.Duration(b-a) * time.Millisecond
	}
	if gaps != len(shapes)-1 || be.StageIdle() != want {
		t.Errorf("idle: %d gaps summing to %v; want %d gaps, %v", gaps, be.StageIdle(), len(shapes)-1, want)
	}
	if len(e.live) != liveBefore {
		t.Errorf("after FreeStaged %d buffers live, before staging %d", len(e.live), liveBefore)
	}
	bufs, err := be.Stage([]byte{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if g := asBytes(download(be, bufs[0])); !bytes.Equal(g[:5], []byte{1, 2, 3, 4, 5}) {
		t.Errorf("staged after FreeStaged: %v", g)
	}
}

// stageStep stages parts on be as the batch path does, runs a step on them
// (the images widened on the device, its first kernel) and marks it done,
// then checks the batch against today's path — the same parts through
// UploadBytes: the same uploads and bytes counted, the same bytes on the
// device, the same floats bit for bit. staged runs right after Stage and
// queued once the step is queued, before StageDone.
func stageStep(t *testing.T, be *Backend, i int, parts [][]byte, staged, queued func()) []backend.Buffer {
	t.Helper()
	t0 := be.Transfers()
	bufs, err := be.Stage(parts...)
	if err != nil {
		t.Fatal(err)
	}
	moved := t0.Since(be.Transfers())
	staged()
	n := len(parts[0])
	x := be.Alloc(n)
	be.BytesToFloat(1.0/255, bufs[0], x)
	queued()
	be.StageDone()

	t1 := be.Transfers()
	ref, whole := make([]backend.Buffer, len(parts)), make([]backend.Buffer, len(parts))
	for k, p := range parts {
		whole[k] = be.Alloc(max((len(p)+3)/4, 1))
		ref[k] = whole[k].Slice(0, (len(p)+3)/4)
		be.UploadBytes(ref[k], p)
	}
	uploaded := t1.Since(be.Transfers())
	if moved != uploaded || moved.Uploads != int64(len(parts)) {
		t.Errorf("batch %d: staging counted %+v, UploadBytes %+v", i, moved, uploaded)
	}
	xr := be.Alloc(n)
	be.BytesToFloat(1.0/255, ref[0], xr)
	got, want := download(be, x), download(be, xr)
	for j := range got {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("batch %d: staged image element %d = %v, through UploadBytes %v", i, j, got[j], want[j])
		}
	}
	for k, p := range parts {
		if bufs[k].Len != ref[k].Len {
			t.Fatalf("batch %d part %d: staged buffer of %d elements, want %d", i, k, bufs[k].Len, ref[k].Len)
		}
		if g := asBytes(download(be, bufs[k])); !bytes.Equal(g[:len(p)], p) {
			t.Errorf("batch %d part %d: staged bytes differ from the host's", i, k)
		}
		be.Free(whole[k])
	}
	be.Free(x)
	be.Free(xr)
	return bufs
}

// TestStagingWithoutDone: a batch never marked done is not overwritten
// while the device may still read it — refilling its slot waits for both
// streams on the host instead of an event on the device.
func TestStagingWithoutDone(t *testing.T) {
	be, e := newHarnessBackend(t)
	rng := rand.New(rand.NewPCG(9, 1))
	for i := range 3 {
		parts := stagedBatch(rng, 2, 8, 3, true)
		syncs := countOps(e.stage, "sync")
		bufs, err := be.Stage(parts...)
		if err != nil {
			t.Fatal(err)
		}
		c := e.stage[lastOp(e.stage, "copy")]
		if i == 2 && (c.after != 0 || countOps(e.stage, "sync") == syncs) {
			t.Errorf("refilling a slot whose batch was not marked done: copy %+v, %d syncs before it", c, countOps(e.stage, "sync")-syncs)
		}
		if g := asBytes(download(be, bufs[5])); !bytes.Equal(g[:len(parts[5])], parts[5]) {
			t.Errorf("batch %d: masks differ", i)
		}
	}
}

// lastOp is the index of the latest entry op in tr, or -1.
func lastOp(tr []stageTrace, op string) int {
	for j := len(tr) - 1; j >= 0; j-- {
		if tr[j].op == op {
			return j
		}
	}
	return -1
}

// lastRecord is the index of the latest record of ev in tr, or -1.
func lastRecord(tr []stageTrace, ev event) int {
	for j := len(tr) - 1; j >= 0; j-- {
		if tr[j].op == "record" && tr[j].event == ev {
			return j
		}
	}
	return -1
}

func countOps(tr []stageTrace, op string) int {
	n := 0
	for _, s := range tr {
		if s.op == op {
			n++
		}
	}
	return n
}

func download(be *Backend, b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	be.Download(v, b)
	return v
}

func asBytes(v []float32) []byte { return toBytes(v) }
