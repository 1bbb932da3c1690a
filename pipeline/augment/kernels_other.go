//go:build !amd64 || purego

package augment

func (t *hsvTable) applyRow(r, g, b []uint8) { t.applyRowGo(r, g, b) }

func vblend(sc []uint32, top, bot []byte, iy, wy uint32) { vblendGo(sc, top, bot, iy, wy) }

func hsample(r, g, b []byte, sc []uint32, U, dU int64, xa, maxX int) {
	hsampleGo(r, g, b, sc, U, dU, xa, maxX)
}

func coefRow(row []uint64, k *coefInputs, hf, hf1 float32, sh *[4]uint64) {
	coefRowGo(row, k, hf, hf1, sh)
}

// haveAVX512: no AVX-512 kernels off amd64 (tests ask).
const haveAVX512 = false
