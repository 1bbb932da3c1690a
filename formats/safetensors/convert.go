package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 1<<20) }

// Float32s converts the tensor to float32. F32, F16, BF16 convert exactly;
// F64 and the integer types are rounded to the nearest float32.
func (t Tensor) Float32s() ([]float32, error) {
	n, err := t.elements()
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	b := t.Data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	default:
		if !integers(t.DType, b, out) {
			return nil, fmt.Errorf("safetensors: cannot convert dtype %q to float32", t.DType)
		}
	}
	return out, nil
}

// Int64s converts an integer or bool tensor to int64. Float dtypes are
// refused: truncating them silently would lose data.
func (t Tensor) Int64s() ([]int64, error) {
	n, err := t.elements()
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	if !integers(t.DType, t.Data, out) {
		return nil, fmt.Errorf("safetensors: cannot convert dtype %q to int64", t.DType)
	}
	return out, nil
}

// elements is the tensor's element count, checked against its data.
func (t Tensor) elements() (int, error) {
	n := t.NumElements()
	if len(t.Data) != n*t.DType.Size() {
		return 0, fmt.Errorf("safetensors: %d data bytes for shape %v of %s", len(t.Data), t.Shape, t.DType)
	}
	return n, nil
}

// integers decodes the elements of an integer or bool tensor of dtype dt
// from b into out; false for any other dtype.
func integers[T float32 | int64](dt DType, b []byte, out []T) bool {
	switch dt {
	case I64:
		for i := range out {
			out[i] = T(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case I32:
		for i := range out {
			out[i] = T(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case I16:
		for i := range out {
			out[i] = T(int16(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case I8:
		for i := range out {
			out[i] = T(int8(b[i]))
		}
	case U8, Bool:
		for i := range out {
			out[i] = T(b[i])
		}
	default:
		return false
	}
	return true
}

// FromFloat32 encodes v as a tensor of dtype d (F32, F16, BF16 or F64).
// Conversions to 16-bit types round to nearest, ties to even.
func FromFloat32(d DType, shape []int, v []float32) (Tensor, error) {
	t := Tensor{DType: d, Shape: append([]int{}, shape...)}
	if t.NumElements() != len(v) {
		return Tensor{}, fmt.Errorf("safetensors: %d values for shape %v", len(v), shape)
	}
	switch d {
	case F32:
		t.Data = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(x))
		}
	case F16:
		t.Data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(t.Data[2*i:], Float32ToHalf(x))
		}
	case BF16:
		t.Data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(t.Data[2*i:], Float32ToBFloat16(x))
		}
	case F64:
		t.Data = make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(t.Data[8*i:], math.Float64bits(float64(x)))
		}
	default:
		return Tensor{}, fmt.Errorf("safetensors: FromFloat32 cannot encode dtype %q", d)
	}
	return t, nil
}

// FromInt64 encodes v as an I64 tensor.
func FromInt64(shape []int, v []int64) (Tensor, error) {
	t := Tensor{DType: I64, Shape: append([]int{}, shape...)}
	if t.NumElements() != len(v) {
		return Tensor{}, fmt.Errorf("safetensors: %d values for shape %v", len(v), shape)
	}
	t.Data = make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(x))
	}
	return t, nil
}

// FromUint8 wraps v (copied) as a U8 tensor.
func FromUint8(shape []int, v []uint8) (Tensor, error) {
	t := Tensor{DType: U8, Shape: append([]int{}, shape...)}
	if t.NumElements() != len(v) {
		return Tensor{}, fmt.Errorf("safetensors: %d values for shape %v", len(v), shape)
	}
	t.Data = append([]byte{}, v...)
	return t, nil
}

// HalfToFloat32 converts an IEEE 754 binary16 value to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN; keep the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: value = mant × 2^-24, exact in float32.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// Float32ToHalf converts f to binary16, rounding to nearest, ties to even;
// overflow gives ±Inf and NaN stays NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflows to ±0
		}
		// Subnormal: shift the implicit-1 mantissa into place and round.
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is the right result (up to Inf)
	}
	return sign | uint16(half)
}

// Float32ToBFloat16 converts f to bfloat16, rounding to nearest, ties to even.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
