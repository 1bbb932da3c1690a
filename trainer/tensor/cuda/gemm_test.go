package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// rowMajor is the brute-force definition of Gemm.
func rowMajor(g backend.Gemm, a, b, c []float32) {
	for bi := 0; bi < max(g.Batch, 1); bi++ {
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s float32
				for k := 0; k < g.K; k++ {
					av := a[bi*g.StrideA+i*g.K+k]
					if g.TransA {
						av = a[bi*g.StrideA+k*g.M+i]
					}
					bv := b[bi*g.StrideB+k*g.N+j]
					if g.TransB {
						bv = b[bi*g.StrideB+j*g.K+k]
					}
					s += av * bv
				}
				o := bi*g.StrideC + i*g.N + j
				if g.Beta == 0 {
					c[o] = g.Alpha * s
				} else {
					c[o] = g.Alpha*s + g.Beta*c[o]
				}
			}
		}
	}
}

// colMajorSgemm is the brute-force definition of cublasSgemmStridedBatched.
func colMajorSgemm(cm colMajorGemm, alpha, beta float32, a, b, c []float32) {
	at := func(x []float32, t bool, ld, off, r, col int) float32 {
		if t {
			return x[off+col+r*ld]
		}
		return x[off+r+col*ld]
	}
	for bi := 0; bi < cm.batch; bi++ {
		for i := 0; i < cm.m; i++ {
			for j := 0; j < cm.n; j++ {
				var s float32
				for k := 0; k < cm.k; k++ {
					s += at(a, cm.transA, cm.lda, bi*cm.strideA, i, k) * at(b, cm.transB, cm.ldb, bi*cm.strideB, k, j)
				}
				o := bi*cm.strid + i + j*cm.ldc
				if beta == 0 {
					c[o] = alpha * s
				} else {
					c[o] = alpha*s + beta*c[o]
				}
			}
		}
	}
}

func TestGemmTransposeIdentity(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		m, n, k, batch int
		ta, tb, shareB bool
		beta           float32
	}{
		{3, 4, 5, 1, false, false, false, 0},
		{3, 4, 5, 1, true, false, false, 1},
		{3, 4, 5, 2, false, true, false, 0.5},
		{2, 7, 3, 3, true, true, false, 0},
		{5, 1, 4, 2, false, false, true, 1},
		{1, 6, 1, 1, true, false, false, 0},
	} {
		g := backend.Gemm{TransA: tc.ta, TransB: tc.tb, M: tc.m, N: tc.n, K: tc.k, Alpha: 1.25, Beta: tc.beta,
			Batch: tc.batch, StrideA: tc.m * tc.k, StrideB: tc.k * tc.n, StrideC: tc.m * tc.n}
		if tc.shareB {
			g.StrideB = 0
		}
		a := randSlice(r, tc.batch*tc.m*tc.k)
		b := randSlice(r, tc.batch*tc.k*tc.n)
		c0 := randSlice(r, tc.batch*tc.m*tc.n)
		want := append([]float32(nil), c0...)
		got := append([]float32(nil), c0...)
		rowMajor(g, a, b, want)
		cm, err := toColMajor(g)
		if err != nil {
			t.Fatal(err)
		}
		ops := [2][]float32{a, b}
		colMajorSgemm(cm, g.Alpha, g.Beta, ops[cm.a], ops[cm.b], got)
		for i := range want {
			if d := want[i] - got[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%+v: element %d = %v, want %v", tc, i, got[i], want[i])
			}
		}
	}
}

func TestGemmRejectsZeroStrideC(t *testing.T) {
	if _, err := toColMajor(backend.Gemm{M: 2, N: 2, K: 2, Batch: 2}); err == nil {
		t.Error("batched gemm with StrideC 0 should be rejected")
	}
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}
