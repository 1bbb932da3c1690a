//go:build linux && amd64 && !purego

package augment

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns n bytes that end where an inaccessible page begins: a
// kernel reading or writing one byte past the row faults.
func guarded(t *testing.T, n int) []byte {
	t.Helper()
	ps := syscall.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	if err := syscall.Mprotect(m[ps:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	return m[ps-n : ps : ps]
}

// TestHSVRowKernelsStayInRow: rows of every length up to 40 that end at
// an inaccessible page (the AVX-512 kernel masks its last step's loads
// and stores) give applyRowGo's bytes and do not fault.
func TestHSVRowKernelsStayInRow(t *testing.T) {
	eachVectorPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		var tab hsvTable
		tab.build(randomGains(r))
		for n := 1; n <= 40; n++ {
			R, G, B := guarded(t, n), guarded(t, n), guarded(t, n)
			randomRow(r, R, G, B)
			want := append(append(append([]byte(nil), R...), G...), B...)
			tab.applyRowGo(want[:n], want[n:2*n], want[2*n:])
			tab.applyRow(R, G, B)
			got := append(append(append([]byte(nil), R...), G...), B...)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("n %d: byte %d: kernel %d, Go %d", n, i, got[i], want[i])
				}
			}
		}
	})
}

// TestVBlendKernelsStayInRow: blended rows of every length up to 80
// whose sources and destination end at an inaccessible page give
// vblendGo's words and do not fault.
func TestVBlendKernelsStayInRow(t *testing.T) {
	eachVectorPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(15, 16))
		for n := 1; n <= 80; n++ {
			top, bot := guarded(t, n+3), guarded(t, n+3)
			for i := range top {
				top[i], bot[i] = uint8(r.IntN(256)), uint8(r.IntN(256))
			}
			d := guarded(t, 4*n)
			got := unsafe.Slice((*uint32)(unsafe.Pointer(&d[0])), n)
			want := make([]uint32, n)
			wy := uint32(r.IntN(256))
			vblend(got, top, bot, 256-wy, wy)
			vblendGo(want, top, bot, 256-wy, wy)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("n %d: value %d: kernel %#x, Go %#x", n, i, got[i], want[i])
				}
			}
		}
	})
}

// TestHSampleKernelsStayInRow: output rows of every length up to 40 that
// end at an inaccessible page give hsampleGo's bytes and do not fault,
// and the AVX-512 kernel reads no further than the slack past the
// blended row (which ends at an inaccessible page too).
func TestHSampleKernelsStayInRow(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const w = 100
	for n := 1; n <= 80; n++ {
		dU := int64((0.5 + 1.5*r.Float64()) * 65536)
		U := int64(r.IntN(10 << 16))
		Ue := U + int64(n-1)*dU
		xa := min(max(int(U>>16), 0), w-1)
		xb := min(max(int(Ue>>16)+1, 0), w-1)
		rowLen := 3 * (xb - xa + 2)
		slack := 0
		if n%2 == 0 {
			slack = hsampleSlack
		}
		raw := guarded(t, 4*(rowLen+slack))
		sc := unsafe.Slice((*uint32)(unsafe.Pointer(&raw[0])), rowLen+slack)[:rowLen]
		for i := range sc[:cap(sc)] {
			sc[:cap(sc)][i] = uint32(r.IntN(255*256+1)) ^ 0x8000 | (uint32(r.IntN(255*256+1))^0x8000)<<16
		}
		R, G, B := guarded(t, n), guarded(t, n), guarded(t, n)
		want := make([]byte, 3*n)
		hsample(R, G, B, sc, U, dU, xa, w-1)
		hsampleGo(want[:n], want[n:2*n], want[2*n:], sc, U, dU, xa, w-1)
		got := append(append(append([]byte(nil), R...), G...), B...)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("n %d: byte %d: kernel %d, Go %d", n, i, got[i], want[i])
			}
		}
	}
}
