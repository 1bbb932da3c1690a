package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"
)

func mustF32(t *testing.T, d DType, shape []int, v []float32) Tensor {
	t.Helper()
	x, err := FromFloat32(d, shape, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestRoundTripAllDTypes(t *testing.T) {
	f := New()
	f.Metadata = map[string]string{"variant": "n", "format": "pt"}
	f.Tensors["w32"] = mustF32(t, F32, []int{2, 3}, []float32{1, -2, 3.5, float32(math.Inf(1)), 0, -0.125})
	f.Tensors["w16"] = mustF32(t, F16, []int{3}, []float32{1, -65504, 6.1035156e-05})
	f.Tensors["wbf"] = mustF32(t, BF16, []int{2}, []float32{1.5, -3})
	f.Tensors["w64"] = mustF32(t, F64, []int{1}, []float32{0.1})
	i64, _ := FromInt64(nil, []int64{-7})
	f.Tensors["count"] = i64
	u8, _ := FromUint8([]int{2, 2}, []uint8{0, 1, 255, 3})
	f.Tensors["mask"] = u8
	f.Tensors["empty"] = Tensor{DType: F32, Shape: []int{0, 4}, Data: []byte{}}

	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	hl := binary.LittleEndian.Uint64(b)
	if (8+hl)%8 != 0 {
		t.Fatalf("data section starts at %d, not a multiple of 8", 8+hl)
	}
	g, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tensors) != len(f.Tensors) || g.Metadata["variant"] != "n" || g.Metadata["format"] != "pt" {
		t.Fatalf("got %d tensors, metadata %v", len(g.Tensors), g.Metadata)
	}
	for name, want := range f.Tensors {
		got := g.Tensors[name]
		if got.DType != want.DType || !bytes.Equal(got.Data, want.Data) || len(got.Shape) != len(want.Shape) {
			t.Errorf("%s: got %v %v, want %v %v", name, got.DType, got.Shape, want.DType, want.Shape)
		}
	}
	// Stream reader agrees with Parse, and a rewrite is byte-identical.
	h, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var buf2 bytes.Buffer
	if err := Write(&buf2, h); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, buf2.Bytes()) {
		t.Fatal("rewrite of a read file is not byte-identical")
	}
	v, _ := g.Tensors["w16"].Float32s()
	if v[0] != 1 || v[1] != -65504 || v[2] != 6.1035156e-05 {
		t.Fatalf("F16 values %v", v)
	}
	n, _ := g.Tensors["count"].Int64s()
	if len(n) != 1 || n[0] != -7 {
		t.Fatalf("I64 scalar %v", n)
	}
	if _, err := g.Tensors["w32"].Int64s(); err == nil {
		t.Fatal("Int64s of F32 must fail")
	}
}

func TestWriteFileDeterministic(t *testing.T) {
	dir := t.TempDir()
	mk := func(order []string) *File {
		f := New()
		for i, n := range order {
			f.Tensors[n] = mustF32(t, F32, []int{1}, []float32{float32(len(n) + i*0)})
		}
		return f
	}
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	if err := WriteFile(a, mk([]string{"z", "a", "m.1", "m.10", "m.2"})); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(b, mk([]string{"m.2", "m.10", "a", "z", "m.1"})); err != nil {
		t.Fatal(err)
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ba, bb) {
		t.Fatal("same contents inserted in different orders gave different files")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

// build makes a file from a literal header and data section.
func build(header string, data []byte) []byte {
	var b bytes.Buffer
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], uint64(len(header)))
	b.Write(l[:])
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestParseRejectsMalformed(t *testing.T) {
	eight := make([]byte, 8)
	cases := []struct {
		name, want string
		file       []byte
	}{
		{"short", "shorter than", []byte{1, 2, 3}},
		{"huge header length", "exceeds the", func() []byte {
			b := make([]byte, 16)
			binary.LittleEndian.PutUint64(b, 1<<40)
			return b
		}()},
		{"header past end", "exceeds the 2 bytes", func() []byte {
			b := make([]byte, 10)
			binary.LittleEndian.PutUint64(b, 5)
			return b
		}()},
		{"not json", "not a JSON object", build("[1,2]   ", nil)},
		{"bad json", "header JSON", build(`{"a":`, nil)},
		{"unknown dtype", `unknown dtype "F8"`, build(`{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, []byte{0})},
		{"negative dim", "negative dimension", build(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil)},
		{"span mismatch", "needs 8", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, eight[:4])},
		{"reversed offsets", "bad data_offsets", build(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, nil)},
		{"overlap", "overlap", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight)},
		{"hole", "leave a hole", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight)},
		{"trailing data", "data section is 8 bytes, header describes 4", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, eight)},
		{"truncated data", "data section is 4 bytes, header describes 8", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, eight[:4])},
		{"bad metadata", "__metadata__", build(`{"__metadata__":{"a":1}}`, nil)},
		{"unknown field", "unknown field", build(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, []byte{0})},
		{"missing shape", "missing shape", build(`{"a":{"dtype":"U8","data_offsets":[0,0]}}`, nil)},
		{"empty name", "empty tensor name", build(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil)},
		{"trailing json", "trailing data", build(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}{}`, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.file)
			if err == nil {
				t.Fatal("accepted a malformed file")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			if _, err2 := Read(bytes.NewReader(c.file)); err2 == nil {
				t.Errorf("Read accepted what Parse refused (%v)", err)
			}
		})
	}
}

func TestWriteRejectsInconsistentTensor(t *testing.T) {
	f := New()
	f.Tensors["a"] = Tensor{DType: F32, Shape: []int{3}, Data: make([]byte, 8)}
	if err := Write(&bytes.Buffer{}, f); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("got %v, want an error naming the tensor", err)
	}
}

// halfRef is the brute-force binary16 value of h computed in float64.
func halfRef(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return s * m * math.Pow(2, -24)
	case 0x1f:
		if m == 0 {
			return s * math.Inf(1)
		}
		return math.NaN()
	}
	return s * (1 + m/1024) * math.Pow(2, float64(e-15))
}

func TestHalfConversionExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := float64(HalfToFloat32(h))
		want := halfRef(h)
		if math.IsNaN(want) {
			if !math.IsNaN(got) {
				t.Fatalf("%#04x: got %v, want NaN", h, got)
			}
			continue
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("%#04x: got %v, want %v", h, got, want)
		}
		// Every half survives a round trip through float32.
		if back := Float32ToHalf(float32(got)); back != h {
			t.Fatalf("%#04x → %v → %#04x", h, got, back)
		}
	}
}

// TestFloat32ToHalfRounding checks rounding against the nearest
// representable halves, found by brute force over all finite halves.
func TestFloat32ToHalfRounding(t *testing.T) {
	var finite []float64
	for i := 0; i < 0x7c00; i++ {
		finite = append(finite, halfRef(uint16(i)))
	}
	probe := []float32{1e-8, 2.9802322e-08, 2.9802326e-08, 5.9604645e-08, 8.940697e-08, 6.097555e-05, 0.33333334, 1.0009766, 1.00048828125, 1.0014648, 65519.99, 65520, 1e6, 123.456, 0.0001}
	for _, p := range probe {
		got := Float32ToHalf(p)
		// nearest, ties to even mantissa
		best, bestD := 0, math.Inf(1)
		for i, v := range finite {
			d := math.Abs(v - float64(p))
			if d < bestD || (d == bestD && i%2 == 0) {
				best, bestD = i, d
			}
		}
		want := uint16(best)
		if float64(p) >= 65520 {
			want = 0x7c00
		}
		if got != want {
			t.Errorf("%g: got %#04x (%g), want %#04x (%g)", p, got, halfRef(got), want, halfRef(want))
		}
		if neg := Float32ToHalf(-p); neg != want|0x8000 {
			t.Errorf("-%g: got %#04x, want %#04x", p, neg, want|0x8000)
		}
	}
}

func TestBFloat16Rounding(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{float32(math.Inf(-1)), 0xff80},
	}
	for _, c := range cases {
		if got := Float32ToBFloat16(c.in); got != c.want {
			t.Errorf("%g: got %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if v := Float32ToBFloat16(float32(math.NaN())); v&0x7f80 != 0x7f80 || v&0x7f == 0 {
		t.Errorf("NaN became %#04x", v)
	}
}

// sharedDir returns ../shared, or on a clone alone the module's copy of
// the loss goldens this package reads (internal/testenv/shared).
func sharedDir(t *testing.T) string {
	t.Helper()
	return shared.Dir(t)
}

// TestReadsReferenceFiles reads files written by the Python safetensors
// library and checks documented facts about them.
func TestReadsReferenceFiles(t *testing.T) {
	dir := filepath.Join(sharedDir(t), "goldens", "loss")
	w, err := ReadFile(filepath.Join(dir, "weights.safetensors"))
	if err != nil {
		t.Fatalf("weights: %v", err)
	}
	if len(w.Tensors) != 844 {
		t.Errorf("weights has %d tensors, want 844", len(w.Tensors))
	}
	cw := w.Tensors["model.0.conv.weight"]
	if cw.DType != F16 || len(cw.Shape) != 4 || cw.Shape[0] != 16 {
		t.Errorf("model.0.conv.weight is %s %v", cw.DType, cw.Shape)
	}
	nbt := w.Tensors["model.0.bn.num_batches_tracked"]
	// The README says shape [], the file stores [1]: accept either, one element.
	if nbt.DType != I64 || nbt.NumElements() != 1 {
		t.Errorf("num_batches_tracked is %s %v", nbt.DType, nbt.Shape)
	}
	b, err := ReadFile(filepath.Join(dir, "batch.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	img, shape, err := b.Float32s("img")
	if err != nil {
		t.Fatal(err)
	}
	if len(img) != 2*3*128*128 || shape[3] != 128 {
		t.Fatalf("img shape %v", shape)
	}
	for _, v := range img {
		if v < 0 || v >= 1 {
			t.Fatalf("img value %v outside [0,1)", v)
		}
	}
	if m := b.Tensors["masks"]; m.DType != U8 {
		t.Errorf("masks dtype %s", m.DType)
	}
}

func FuzzParse(f *testing.F) {
	ok := New()
	ok.Metadata = map[string]string{"k": "v"}
	ok.Tensors["a"] = Tensor{DType: F32, Shape: []int{2}, Data: make([]byte, 8)}
	ok.Tensors["b"] = Tensor{DType: U8, Shape: []int{}, Data: []byte{1}}
	var buf bytes.Buffer
	_ = Write(&buf, ok)
	f.Add(buf.Bytes())
	f.Add(build(`{"a":{"dtype":"F16","shape":[1,1],"data_offsets":[0,2]}}`, []byte{0, 0x3c}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		file2, err2 := Read(bytes.NewReader(b))
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Parse err %v, Read err %v", err, err2)
		}
		if err != nil {
			return
		}
		// Whatever parses re-encodes and parses to the same contents.
		var out bytes.Buffer
		if err := Write(&out, file); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := Parse(out.Bytes())
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if len(again.Tensors) != len(file.Tensors) || len(file2.Tensors) != len(file.Tensors) {
			t.Fatal("tensor count changed")
		}
		for name, x := range file.Tensors {
			y := again.Tensors[name]
			if x.DType != y.DType || !bytes.Equal(x.Data, y.Data) || x.NumElements() != y.NumElements() {
				t.Fatalf("tensor %q changed", name)
			}
			// Parse checked the dtype and that the data fills the shape, so
			// every tensor it returns, bool included, converts.
			if _, err := x.Float32s(); err != nil {
				t.Fatalf("tensor %q (%s %v) parsed but does not convert: %v", name, x.DType, x.Shape, err)
			}
		}
	})
}
