//go:build amd64 && !purego

package ycc

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 colour conversion; the Go rows are its test
// oracle and the path on other CPUs.
var haveAVX2 = cpu.X86.HasAVX2

// forceGo makes the conversion use the Go rows (tests, benchmarks).
var forceGo bool

// yccRowAVX2 converts n pixels (n a positive multiple of 16) to
// interleaved RGB, exactly as ycc does; half reads one chroma sample per
// pixel pair.
//
//go:noescape
func yccRowAVX2(dst, y, cb, cr *byte, n int, half bool)

// RowFull converts one row of pixels with full-resolution chroma into row
// (3·len(Y) bytes).
func RowFull(row, Y, cb, cr []byte) {
	n := 0
	if haveAVX2 && !forceGo {
		n = len(Y) &^ 15
		if n > 0 {
			_, _, _ = row[3*n-1], cb[n-1], cr[n-1]
			yccRowAVX2(&row[0], &Y[0], &cb[0], &cr[0], n, false)
		}
	}
	rowFullGo(row[3*n:], Y[n:], cb[n:], cr[n:])
}

// RowHalf converts one row whose chroma has one sample per pixel pair
// (len(cb) = (len(Y)+1)/2) into row.
func RowHalf(row, Y, cb, cr []byte) {
	n := 0
	if haveAVX2 && !forceGo {
		n = len(Y) &^ 15
		if n > 0 {
			_, _, _ = row[3*n-1], cb[n/2-1], cr[n/2-1]
			yccRowAVX2(&row[0], &Y[0], &cb[0], &cr[0], n, true)
		}
	}
	rowHalfGo(row[3*n:], Y[n:], cb[n/2:], cr[n/2:])
}
