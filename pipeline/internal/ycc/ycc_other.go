//go:build !amd64 || purego

package ycc

// forceGo has no effect where the Go rows are the only ones.
var forceGo bool

// RowFull converts one row of pixels with full-resolution chroma into row
// (3·len(Y) bytes).
func RowFull(row, Y, cb, cr []byte) { rowFullGo(row, Y, cb, cr) }

// RowHalf converts one row whose chroma has one sample per pixel pair
// (len(cb) = (len(Y)+1)/2) into row.
func RowHalf(row, Y, cb, cr []byte) { rowHalfGo(row, Y, cb, cr) }
