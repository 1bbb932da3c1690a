package jpeg

import (
	"math/rand/v2"
	"testing"
)

// TestIDCTStoreMatchesGo: the dispatched inverse DCT and store (the vector
// kernel on AVX2) give idctGo + storeBlock's bytes on random blocks: sparse
// ones as real images have, dense ones, and coefficients at the extremes
// of dequantised 8-bit data, where the samples saturate.
func TestIDCTStoreMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const stride = 13
	for trial := 0; trial < 20000; trial++ {
		var b [64]int32
		lim := []int32{64, 1024, 2048 * 16, 1 << 16}[trial%4]
		nz := 1 + r.IntN(64)
		for i := 0; i < nz; i++ {
			b[r.IntN(64)] = r.Int32N(2*lim+1) - lim
		}
		want := b
		got := b
		dg := make([]byte, 8*stride)
		dw := make([]byte, 8*stride)
		idctStore(dg, stride, &got)
		idctGo(&want)
		storeBlock(dw, stride, &want)
		for i := range dg {
			if dg[i] != dw[i] {
				t.Fatalf("trial %d block %v: byte %d (row %d col %d): %d, Go %d", trial, b, i, i/stride, i%stride, dg[i], dw[i])
			}
		}
	}
}
