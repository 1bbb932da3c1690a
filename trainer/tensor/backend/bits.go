package backend

import "unsafe"

// Buffers hold float32 elements; int32 arrays and byte arrays (the
// loader's uint8 masks and flags) live in them with their bits untouched.
// These views reinterpret a host slice in place, without a copy; nil for
// an empty slice.

// Int32s views s as int32 elements.
func Int32s(s []float32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&s[0])), len(s))
}

// Bytes views s as its 4·len(s) bytes.
func Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

// Int32Bytes views s as its 4·len(s) bytes.
func Int32Bytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
