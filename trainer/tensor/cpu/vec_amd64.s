//go:build amd64 && !purego

#include "textflag.h"

// func axpyAVX2(a float32, x, y *float32, n int)
// y += a·x, n a multiple of 16.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS a+0(FP), Y15
	MOVQ         x+8(FP), SI
	MOVQ         y+16(FP), DI
	MOVQ         n+24(FP), CX
	SHRQ         $4, CX
	JEQ          adone

aloop:
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	DECQ        CX
	JNE         aloop

adone:
	VZEROUPPER
	RET

// func dotAVX2(x, y *float32, n int) float32
// Σ x·y with float32 lanes, n a multiple of 16.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ   $4, CX
	JEQ    ddone

dloop:
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VFMADD231PS (DI), Y2, Y0
	VFMADD231PS 32(DI), Y3, Y1
	ADDQ        $64, SI
	ADDQ        $64, DI
	DECQ        CX
	JNE         dloop

ddone:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVHLPS     X0, X0, X1
	VADDPS       X1, X0, X0
	VMOVSHDUP    X0, X1
	VADDSS       X1, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET
