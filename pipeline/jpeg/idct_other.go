//go:build !amd64 || purego

package jpeg

// forceGo has no effect where the Go inverse DCT is the only one.
var forceGo bool

// idctStore transforms b and stores its 8×8 samples at dst.
func idctStore(dst []byte, stride int, b *[64]int32) {
	idctGo(b)
	storeBlock(dst, stride, b)
}
