//go:build amd64 && !purego

#include "textflag.h"

// Horizontal sum of the four float64 lanes of Y reg into the low lane of X reg.
#define HSUM(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPD       T, X, X  \
	VPERMILPD    $1, X, T \
	VADDSD       T, X, X

// func sumShiftAVX2(x *float32, n int, k float64) (s, ss float64)
// s = Σ(x−k), ss = Σ(x−k)² in float64, n a multiple of 8.
TEXT ·sumShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD k+16(FP), Y15
	VXORPD       Y2, Y2, Y2
	VXORPD       Y3, Y3, Y3
	VXORPD       Y4, Y4, Y4
	VXORPD       Y5, Y5, Y5
	SHRQ         $3, CX
	JEQ          sdone

sloop:
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y1
	VSUBPD      Y15, Y0, Y0
	VSUBPD      Y15, Y1, Y1
	VADDPD      Y0, Y2, Y2
	VADDPD      Y1, Y3, Y3
	VFMADD231PD Y0, Y0, Y4
	VFMADD231PD Y1, Y1, Y5
	ADDQ        $32, SI
	DECQ        CX
	JNE         sloop

sdone:
	VADDPD Y3, Y2, Y2
	VADDPD Y5, Y4, Y4
	HSUM(Y2, X2, X6)
	HSUM(Y4, X4, X7)
	VMOVSD X2, s+24(FP)
	VMOVSD X4, ss+32(FP)
	VZEROUPPER
	RET

// func sumDyDyxAVX2(dy, x *float32, n int, k float64) (s, sx float64)
// s = Σdy, sx = Σdy·(x−k) in float64, n a multiple of 8.
TEXT ·sumDyDyxAVX2(SB), NOSPLIT, $0-48
	MOVQ         dy+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         n+16(FP), CX
	VBROADCASTSD k+24(FP), Y15
	VXORPD       Y2, Y2, Y2
	VXORPD       Y3, Y3, Y3
	VXORPD       Y4, Y4, Y4
	VXORPD       Y5, Y5, Y5
	SHRQ         $3, CX
	JEQ          ddone

dloop:
	VCVTPS2PD   (SI), Y0
	VCVTPS2PD   16(SI), Y1
	VCVTPS2PD   (DI), Y8
	VCVTPS2PD   16(DI), Y9
	VSUBPD      Y15, Y8, Y8
	VSUBPD      Y15, Y9, Y9
	VADDPD      Y0, Y2, Y2
	VADDPD      Y1, Y3, Y3
	VFMADD231PD Y0, Y8, Y4
	VFMADD231PD Y1, Y9, Y5
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNE         dloop

ddone:
	VADDPD Y3, Y2, Y2
	VADDPD Y5, Y4, Y4
	HSUM(Y2, X2, X6)
	HSUM(Y4, X4, X7)
	VMOVSD X2, s+32(FP)
	VMOVSD X4, sx+40(FP)
	VZEROUPPER
	RET

// func affineAVX2(x, y *float32, n int, a, b float32)
// y = x·a + b, n a multiple of 8.
TEXT ·affineAVX2(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y14
	VBROADCASTSS b+28(FP), Y15
	SHRQ         $3, CX
	JEQ          adone

aloop:
	VMOVUPS     (SI), Y0
	VMOVAPS     Y15, Y1
	VFMADD231PS Y0, Y14, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNE         aloop

adone:
	VZEROUPPER
	RET

// func bnBackAVX2(dy, x, dx *float32, n int, kd, mdy, kx, m float32)
// dx += kd·(dy − mdy) − kx·(x − m), n a multiple of 8.
TEXT ·bnBackAVX2(SB), NOSPLIT, $0-48
	MOVQ         dy+0(FP), SI
	MOVQ         x+8(FP), BX
	MOVQ         dx+16(FP), DI
	MOVQ         n+24(FP), CX
	VBROADCASTSS kd+32(FP), Y12
	VBROADCASTSS mdy+36(FP), Y13
	VBROADCASTSS kx+40(FP), Y14
	VBROADCASTSS m+44(FP), Y15
	SHRQ         $3, CX
	JEQ          bdone

bloop:
	VMOVUPS      (SI), Y0
	VSUBPS       Y13, Y0, Y0
	VMOVUPS      (BX), Y1
	VSUBPS       Y15, Y1, Y1
	VMOVUPS      (DI), Y2
	VFMADD231PS  Y0, Y12, Y2
	VFNMADD231PS Y1, Y14, Y2
	VMOVUPS      Y2, (DI)
	ADDQ         $32, SI
	ADDQ         $32, BX
	ADDQ         $32, DI
	DECQ         CX
	JNE          bloop

bdone:
	VZEROUPPER
	RET
