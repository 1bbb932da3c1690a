//go:build amd64 && !purego

package jpeg

import "golang.org/x/sys/cpu"

// haveAVX2 selects the vector inverse DCT; idctGo and storeBlock are its
// test oracle and the path on other CPUs.
var haveAVX2 = cpu.X86.HasAVX2

// forceGo makes the decoder use the Go inverse DCT (tests, benchmarks).
var forceGo bool

// idctStoreAVX2 is idctGo followed by storeBlock(dst, stride, b): both
// passes eight rows or columns at a time, then level shift and saturation
// by packing. It leaves b unspecified.
//
//go:noescape
func idctStoreAVX2(b *[64]int32, dst *byte, stride int)

// idctStore transforms b and stores its 8×8 samples at dst.
func idctStore(dst []byte, stride int, b *[64]int32) {
	if haveAVX2 && !forceGo {
		_ = dst[7*stride+7]
		idctStoreAVX2(b, &dst[0], stride)
		return
	}
	idctGo(b)
	storeBlock(dst, stride, b)
}
