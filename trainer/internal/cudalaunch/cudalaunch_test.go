package cudalaunch

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestPackLaysOutTableThenAlignedValues(t *testing.T) {
	const base = 0x7f0000001000
	args := []Arg{Int32Arg(-3), PtrArg(0xdead0000), Float32Arg(1.5), Int64Arg(1 << 40), Int32Arg(7)}
	block := make([]byte, 128)
	n, err := Pack(block, base, args)
	if err != nil {
		t.Fatal(err)
	}
	// Table of 5 addresses (40 bytes), then int at 40, pointer aligned to
	// 48, float at 56, long long aligned to 64, int at 72: 76 bytes.
	wantOff := []int{40, 48, 56, 64, 72}
	if n != 76 {
		t.Errorf("used %d bytes, want 76", n)
	}
	for i, off := range wantOff {
		if got := binary.LittleEndian.Uint64(block[8*i:]); got != base+uint64(off) {
			t.Errorf("arg %d address %#x, want %#x", i, got, base+uint64(off))
		}
	}
	le := binary.LittleEndian
	if v := int32(le.Uint32(block[40:])); v != -3 {
		t.Errorf("int32 = %d", v)
	}
	if v := le.Uint64(block[48:]); v != 0xdead0000 {
		t.Errorf("ptr = %#x", v)
	}
	if v := math.Float32frombits(le.Uint32(block[56:])); v != 1.5 {
		t.Errorf("float = %v", v)
	}
	if v := le.Uint64(block[64:]); v != 1<<40 {
		t.Errorf("int64 = %d", v)
	}
	if v := le.Uint32(block[72:]); v != 7 {
		t.Errorf("int32 = %d", v)
	}
}

func TestPackRefusesArgumentsOverTheBlock(t *testing.T) {
	args := make([]Arg, 20)
	for i := range args {
		args[i] = PtrArg(Ptr(i))
	}
	if _, err := Pack(make([]byte, 64), 0, args); err == nil {
		t.Error("20 pointers in 64 bytes should fail")
	}
}

// A struct goes by value at 8-byte alignment (at most), its bytes as laid
// out, after a 4-byte int that leaves a gap before it.
func TestPackCopiesAStructByValue(t *testing.T) {
	st := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	args := []Arg{Int32Arg(5), StructArg(st), Float32Arg(2)}
	block := make([]byte, 64)
	n, err := Pack(block, 0x1000, args)
	if err != nil {
		t.Fatal(err)
	}
	// Table 24 bytes, int at 24, struct aligned to 32 (12 bytes), float at 44.
	le := binary.LittleEndian
	for i, off := range []uint64{24, 32, 44} {
		if got := le.Uint64(block[8*i:]); got != 0x1000+off {
			t.Errorf("arg %d at %#x, want %#x", i, got, 0x1000+off)
		}
	}
	if n != 48 || string(block[32:44]) != string(st) || math.Float32frombits(le.Uint32(block[44:])) != 2 {
		t.Errorf("used %d bytes (want 48), struct % x, float %v", n, block[32:44], math.Float32frombits(le.Uint32(block[44:])))
	}
	if a := args[1]; a.Kind() != Struct || string(a.Bytes()) != string(st) || a.Bits() != 0 {
		t.Errorf("struct arg kind %c bytes % x bits %d", a.Kind(), a.Bytes(), a.Bits())
	}
}

// The grids carry their shape and count to the launcher.
func TestGridsCarryShapeAndCount(t *testing.T) {
	for _, tc := range []struct {
		g    Grid
		kind GridKind
		n    int
	}{{Elements(7), ElementGrid, 7}, {Blocks(3), BlockGrid, 3}, {OneBlock(), OneBlockGrid, 0}, {OneThread(), OneThreadGrid, 0}} {
		if tc.g.Kind() != tc.kind || tc.g.N() != tc.n {
			t.Errorf("grid %+v: kind %d n %d, want %d %d", tc.g, tc.g.Kind(), tc.g.N(), tc.kind, tc.n)
		}
	}
}
