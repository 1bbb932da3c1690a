package batch

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// sampleWindowed is sample's batch in windowed form: the windows of its
// three masks on the 2x3 grid and their bytes.
func sampleWindowed(t *testing.T) (*Builder, *Columns) {
	t.Helper()
	b, c, _ := sample(t, nil)
	// masks: [1 0 1 / 0 1 0], [0 0 1 / 1 1 1], [1 1 0 / 0 0 0]
	c.Masks = nil
	c.Windows = bufOf([]int32{0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 2, 1})
	c.WindowOffsets = bufOf([]int32{0, 6, 14})
	c.WindowData = bufOf([]byte{1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1})
	return b, c
}

// TestBuildWindowedRoundTrip: a windowed record built over caller buffers
// reads back through MaskWindowsOf — grid, split, windows and data, the
// latter aliasing the buffers — also after an IPC round trip, and its other
// columns read as the dense record's.
func TestBuildWindowedRoundTrip(t *testing.T) {
	b, c := sampleWindowed(t)
	rec, err := b.BuildWindowed(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if !IsWindowed(rec.Schema()) || !rec.Schema().Equal(b.WindowedSchema()) {
		t.Fatalf("schema %s", rec.Schema())
	}
	back := ipcRoundTrip(t, rec)
	defer back.Release()
	for i, r := range []arrow.RecordBatch{rec, back} {
		m, err := MaskWindowsOf(r)
		if err != nil {
			t.Fatal(err)
		}
		if m.Rows != 2 || m.Cols != 3 || m.Count() != 3 || !slices.Equal(m.Offsets, []int32{0, 1, 3}) ||
			!slices.Equal(m.Windows, []int32{0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 2, 1}) || !bytes.Equal(m.Data, c.WindowData.Bytes()) {
			t.Fatalf("record %d: read back %+v", i, m)
		}
		if i == 0 && &m.Data[0] != &c.WindowData.Bytes()[0] {
			t.Fatal("window data copied")
		}
		in, err := InstancesWithoutMasks(r)
		if err != nil {
			t.Fatal(err)
		}
		if in.Masks != nil || !slices.Equal(in.BoxesPerImage, []int{1, 2}) || !slices.Equal(in.Classes, []int32{5, 0, 79}) {
			t.Fatalf("record %d: instances %+v", i, in)
		}
		if _, err := InstancesOf(r); err == nil || !strings.Contains(err.Error(), "windowed") {
			t.Fatalf("InstancesOf on a windowed record: %v", err)
		}
	}
}

// TestWindowedOfMatchesBuildWindowed: the windowed form of a dense record
// (what the server sends) is the record BuildWindowed makes from the same
// buffers.
func TestWindowedOfMatchesBuildWindowed(t *testing.T) {
	b, c, _ := sample(t, nil)
	dense, err := b.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	defer dense.Release()
	_, w := sampleWindowed(t)
	got, err := windowedOf(b.WindowedSchema(), dense, w.Windows, w.WindowOffsets, w.WindowData)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	want, err := b.BuildWindowed(w)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	if !array.RecordEqual(got, want) {
		t.Fatalf("WindowedOf %v\nBuildWindowed %v", got, want)
	}
}

// TestBuildWindowedRefusesBadOffsets: data offsets that decrease, start
// below 0 or end past the data are refused naming the column.
func TestBuildWindowedRefusesBadOffsets(t *testing.T) {
	for _, offs := range [][]int32{{0, 7, 6}, {-1, 6, 14}, {0, 6, 15}} {
		b, c := sampleWindowed(t)
		c.WindowOffsets = bufOf(offs)
		if rec, err := b.BuildWindowed(c); err == nil || !strings.Contains(err.Error(), ColMaskData) {
			if rec != nil {
				rec.Release()
			}
			t.Errorf("offsets %v: %v, want an error naming %s", offs, err, ColMaskData)
		}
	}
	b, c := sampleWindowed(t)
	c.Windows = bufOf([]int32{0, 0, 3, 2})
	if _, err := b.BuildWindowed(c); err == nil {
		t.Error("one window for three instances accepted")
	}
}

// mangledWindowed builds the sample's windowed record with its mask part's
// buffers and metadata replaced by what a fuzzer gives — window list
// offsets, windows, data offsets, data, the grid — without Build's checks:
// what a server could put on the wire. Nil when arrow-go itself refuses
// to make the arrays (it panics on binary offsets outside the data, so no
// record off the wire holds those).
func mangledWindowed(t *testing.T, listOffs, wins, dataOffs []byte, data []byte, grid string) (out arrow.RecordBatch) {
	t.Helper()
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	b, c := sampleWindowed(t)
	rec, err := b.BuildWindowed(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	s := rec.Schema()
	md := s.Metadata()
	vals := md.Values()
	vals[md.FindKey(MetaMaskGrid)] = grid
	m := arrow.NewMetadata(md.Keys(), vals)
	schema := arrow.NewSchema(s.Fields(), &m)
	buf := memory.NewBufferBytes
	sumN := len(wins) / 16
	v := array.NewData(arrow.PrimitiveTypes.Int32, 4*sumN, []*memory.Buffer{nil, buf(wins)}, nil, 0, 0)
	f := array.NewData(windowType.Elem(), sumN, []*memory.Buffer{nil}, []arrow.ArrayData{v}, 0, 0)
	wd := array.NewData(windowType, 2, []*memory.Buffer{nil, buf(listOffs)}, []arrow.ArrayData{f}, 0, 0)
	bd := array.NewData(arrow.BinaryTypes.Binary, 2, []*memory.Buffer{nil, buf(dataOffs), buf(data)}, nil, 0, 0)
	cols := append([]arrow.Array(nil), rec.Columns()[:nDense]...)
	wa, ba := array.MakeFromData(wd), array.MakeFromData(bd)
	out = array.NewRecordBatch(schema, append(cols, wa, ba), 2)
	for _, x := range []interface{ Release() }{v, f, wd, bd, wa, ba} {
		x.Release()
	}
	return out
}

// FuzzMaskWindowsOf: whatever the windowed columns' buffers and the grid
// metadata hold, MaskWindowsOf returns a view that stays inside them or an
// error, never a panic; an accepted view has four values a window, one
// window per instance of its split, and data within the column's bytes.
func FuzzMaskWindowsOf(f *testing.F) {
	i32 := func(v ...int32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
		return b
	}
	f.Add(i32(0, 1, 3), i32(0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 2, 1), i32(0, 6, 14), bytes.Repeat([]byte{1}, 14), "2,3")
	f.Add(i32(0, 2, 1), i32(0, 0, 3, 2), i32(0, 9, 3), []byte{1}, "2,3")
	f.Add(i32(-4, 1), i32(), i32(5), []byte{}, "0,3")
	f.Add(i32(0, 1, 300), i32(1, 1, 1, 1), i32(0, 1, 1), []byte{1}, "9,9")
	f.Fuzz(func(t *testing.T, listOffs, wins, dataOffs, data []byte, grid string) {
		rec := mangledWindowed(t, listOffs, wins, dataOffs, data, grid)
		if rec == nil {
			return
		}
		defer rec.Release()
		m, err := MaskWindowsOf(rec)
		if err != nil {
			return
		}
		if m.Rows <= 0 || m.Cols <= 0 || m.Rows > 8 || m.Cols > 12 {
			t.Fatalf("grid %dx%d accepted on 8x12 images", m.Rows, m.Cols)
		}
		if len(m.Offsets) != 3 || len(m.Windows) != 4*int(m.Offsets[2]-m.Offsets[0]) || len(m.Windows) > len(wins)/4 || len(m.Data) > len(data) {
			t.Fatalf("view of %d offsets, %d window values (of %d bytes), %d data bytes (of %d)", len(m.Offsets), len(m.Windows), len(wins), len(m.Data), len(data))
		}
	})
}

func TestMaskWindowsCheckCounts(t *testing.T) {
	m := MaskWindows{Offsets: []int32{0, 1, 3}}
	for _, c := range []struct {
		bpi []int
		ok  bool
	}{{[]int{1, 2}, true}, {[]int{2, 1}, false}, {[]int{1, 2, 0}, false}, {[]int{3}, false}} {
		if err := m.CheckCounts(c.bpi); (err == nil) != c.ok {
			t.Errorf("CheckCounts(%v): %v", c.bpi, err)
		}
	}
}
