package cuda

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestPackArgsLayout(t *testing.T) {
	const base = 0x7f0000001000
	args := []arg{i32Arg(-3), ptrArg(0xdead0000), f32Arg(1.5), i64Arg(1 << 40), i32Arg(7)}
	block := make([]byte, 128)
	n, err := packArgs(block, base, args)
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

func TestPackArgsTooLarge(t *testing.T) {
	args := make([]arg, 20)
	for i := range args {
		args[i] = ptrArg(Ptr(i))
	}
	if _, err := packArgs(make([]byte, 64), 0, args); err == nil {
		t.Error("20 pointers in 64 bytes should fail")
	}
}
