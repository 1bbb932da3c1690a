//go:build amd64 && !purego

#include "textflag.h"

// Cephes-style expf constants, each replicated eight times so they can be
// used directly as 256-bit memory operands.
DATA sigc<>+0(SB)/4, $0x42b0c0a5
DATA sigc<>+4(SB)/4, $0x42b0c0a5
DATA sigc<>+8(SB)/4, $0x42b0c0a5
DATA sigc<>+12(SB)/4, $0x42b0c0a5
DATA sigc<>+16(SB)/4, $0x42b0c0a5
DATA sigc<>+20(SB)/4, $0x42b0c0a5
DATA sigc<>+24(SB)/4, $0x42b0c0a5
DATA sigc<>+28(SB)/4, $0x42b0c0a5
DATA sigc<>+32(SB)/4, $0xc2b0c0a5
DATA sigc<>+36(SB)/4, $0xc2b0c0a5
DATA sigc<>+40(SB)/4, $0xc2b0c0a5
DATA sigc<>+44(SB)/4, $0xc2b0c0a5
DATA sigc<>+48(SB)/4, $0xc2b0c0a5
DATA sigc<>+52(SB)/4, $0xc2b0c0a5
DATA sigc<>+56(SB)/4, $0xc2b0c0a5
DATA sigc<>+60(SB)/4, $0xc2b0c0a5
DATA sigc<>+64(SB)/4, $0x3fb8aa3b
DATA sigc<>+68(SB)/4, $0x3fb8aa3b
DATA sigc<>+72(SB)/4, $0x3fb8aa3b
DATA sigc<>+76(SB)/4, $0x3fb8aa3b
DATA sigc<>+80(SB)/4, $0x3fb8aa3b
DATA sigc<>+84(SB)/4, $0x3fb8aa3b
DATA sigc<>+88(SB)/4, $0x3fb8aa3b
DATA sigc<>+92(SB)/4, $0x3fb8aa3b
DATA sigc<>+96(SB)/4, $0x3f000000
DATA sigc<>+100(SB)/4, $0x3f000000
DATA sigc<>+104(SB)/4, $0x3f000000
DATA sigc<>+108(SB)/4, $0x3f000000
DATA sigc<>+112(SB)/4, $0x3f000000
DATA sigc<>+116(SB)/4, $0x3f000000
DATA sigc<>+120(SB)/4, $0x3f000000
DATA sigc<>+124(SB)/4, $0x3f000000
DATA sigc<>+128(SB)/4, $0x3f318000
DATA sigc<>+132(SB)/4, $0x3f318000
DATA sigc<>+136(SB)/4, $0x3f318000
DATA sigc<>+140(SB)/4, $0x3f318000
DATA sigc<>+144(SB)/4, $0x3f318000
DATA sigc<>+148(SB)/4, $0x3f318000
DATA sigc<>+152(SB)/4, $0x3f318000
DATA sigc<>+156(SB)/4, $0x3f318000
DATA sigc<>+160(SB)/4, $0xb95e8083
DATA sigc<>+164(SB)/4, $0xb95e8083
DATA sigc<>+168(SB)/4, $0xb95e8083
DATA sigc<>+172(SB)/4, $0xb95e8083
DATA sigc<>+176(SB)/4, $0xb95e8083
DATA sigc<>+180(SB)/4, $0xb95e8083
DATA sigc<>+184(SB)/4, $0xb95e8083
DATA sigc<>+188(SB)/4, $0xb95e8083
DATA sigc<>+192(SB)/4, $0x39506967
DATA sigc<>+196(SB)/4, $0x39506967
DATA sigc<>+200(SB)/4, $0x39506967
DATA sigc<>+204(SB)/4, $0x39506967
DATA sigc<>+208(SB)/4, $0x39506967
DATA sigc<>+212(SB)/4, $0x39506967
DATA sigc<>+216(SB)/4, $0x39506967
DATA sigc<>+220(SB)/4, $0x39506967
DATA sigc<>+224(SB)/4, $0x3ab743ce
DATA sigc<>+228(SB)/4, $0x3ab743ce
DATA sigc<>+232(SB)/4, $0x3ab743ce
DATA sigc<>+236(SB)/4, $0x3ab743ce
DATA sigc<>+240(SB)/4, $0x3ab743ce
DATA sigc<>+244(SB)/4, $0x3ab743ce
DATA sigc<>+248(SB)/4, $0x3ab743ce
DATA sigc<>+252(SB)/4, $0x3ab743ce
DATA sigc<>+256(SB)/4, $0x3c088908
DATA sigc<>+260(SB)/4, $0x3c088908
DATA sigc<>+264(SB)/4, $0x3c088908
DATA sigc<>+268(SB)/4, $0x3c088908
DATA sigc<>+272(SB)/4, $0x3c088908
DATA sigc<>+276(SB)/4, $0x3c088908
DATA sigc<>+280(SB)/4, $0x3c088908
DATA sigc<>+284(SB)/4, $0x3c088908
DATA sigc<>+288(SB)/4, $0x3d2aa9c1
DATA sigc<>+292(SB)/4, $0x3d2aa9c1
DATA sigc<>+296(SB)/4, $0x3d2aa9c1
DATA sigc<>+300(SB)/4, $0x3d2aa9c1
DATA sigc<>+304(SB)/4, $0x3d2aa9c1
DATA sigc<>+308(SB)/4, $0x3d2aa9c1
DATA sigc<>+312(SB)/4, $0x3d2aa9c1
DATA sigc<>+316(SB)/4, $0x3d2aa9c1
DATA sigc<>+320(SB)/4, $0x3e2aaaaa
DATA sigc<>+324(SB)/4, $0x3e2aaaaa
DATA sigc<>+328(SB)/4, $0x3e2aaaaa
DATA sigc<>+332(SB)/4, $0x3e2aaaaa
DATA sigc<>+336(SB)/4, $0x3e2aaaaa
DATA sigc<>+340(SB)/4, $0x3e2aaaaa
DATA sigc<>+344(SB)/4, $0x3e2aaaaa
DATA sigc<>+348(SB)/4, $0x3e2aaaaa
DATA sigc<>+352(SB)/4, $0x3f000000
DATA sigc<>+356(SB)/4, $0x3f000000
DATA sigc<>+360(SB)/4, $0x3f000000
DATA sigc<>+364(SB)/4, $0x3f000000
DATA sigc<>+368(SB)/4, $0x3f000000
DATA sigc<>+372(SB)/4, $0x3f000000
DATA sigc<>+376(SB)/4, $0x3f000000
DATA sigc<>+380(SB)/4, $0x3f000000
DATA sigc<>+384(SB)/4, $0x3f800000
DATA sigc<>+388(SB)/4, $0x3f800000
DATA sigc<>+392(SB)/4, $0x3f800000
DATA sigc<>+396(SB)/4, $0x3f800000
DATA sigc<>+400(SB)/4, $0x3f800000
DATA sigc<>+404(SB)/4, $0x3f800000
DATA sigc<>+408(SB)/4, $0x3f800000
DATA sigc<>+412(SB)/4, $0x3f800000
DATA sigc<>+416(SB)/4, $0x7f
DATA sigc<>+420(SB)/4, $0x7f
DATA sigc<>+424(SB)/4, $0x7f
DATA sigc<>+428(SB)/4, $0x7f
DATA sigc<>+432(SB)/4, $0x7f
DATA sigc<>+436(SB)/4, $0x7f
DATA sigc<>+440(SB)/4, $0x7f
DATA sigc<>+444(SB)/4, $0x7f
DATA sigc<>+448(SB)/4, $0x40000000
DATA sigc<>+452(SB)/4, $0x40000000
DATA sigc<>+456(SB)/4, $0x40000000
DATA sigc<>+460(SB)/4, $0x40000000
DATA sigc<>+464(SB)/4, $0x40000000
DATA sigc<>+468(SB)/4, $0x40000000
DATA sigc<>+472(SB)/4, $0x40000000
DATA sigc<>+476(SB)/4, $0x40000000
GLOBL sigc<>(SB), RODATA|NOPTR, $480

// func sigmoidAVX2(x, y *float32, n int, silu bool)
// y = 1/(1+exp(-x)) (times x when silu) for n elements, n a multiple of 8.
// exp is the Cephes expf scheme: clamp, split n·ln2 in two parts, degree-5
// polynomial, scale by 2^n through the exponent bits. The reciprocal is
// VRCPPS refined by one Newton step (≈ 2^-23 relative), several times
// cheaper than VDIVPS.
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-25
	MOVQ    x+0(FP), SI
	MOVQ    y+8(FP), DI
	MOVQ    n+16(FP), CX
	MOVBQZX silu+24(FP), DX
	SHRQ    $3, CX
	JEQ     done
	VXORPS  Y15, Y15, Y15

loop:
	VMOVUPS (SI), Y0
	VSUBPS  Y0, Y15, Y1
	VMINPS  sigc<>+0(SB), Y1, Y1
	VMAXPS  sigc<>+32(SB), Y1, Y1
	VMOVUPS sigc<>+96(SB), Y2
	VFMADD231PS sigc<>+64(SB), Y1, Y2
	VROUNDPS $1, Y2, Y2
	VFNMADD231PS sigc<>+128(SB), Y2, Y1
	VFNMADD231PS sigc<>+160(SB), Y2, Y1
	VMOVUPS sigc<>+192(SB), Y3
	VFMADD213PS sigc<>+224(SB), Y1, Y3
	VFMADD213PS sigc<>+256(SB), Y1, Y3
	VFMADD213PS sigc<>+288(SB), Y1, Y3
	VFMADD213PS sigc<>+320(SB), Y1, Y3
	VFMADD213PS sigc<>+352(SB), Y1, Y3
	VMULPS  Y1, Y1, Y4
	VFMADD213PS Y1, Y4, Y3
	VADDPS  sigc<>+384(SB), Y3, Y3
	VCVTTPS2DQ Y2, Y5
	VPADDD  sigc<>+416(SB), Y5, Y5
	VPSLLD  $23, Y5, Y5
	VMULPS  Y5, Y3, Y3
	VADDPS  sigc<>+384(SB), Y3, Y3
	VRCPPS  Y3, Y6
	VMOVAPS Y6, Y7
	VFNMADD213PS sigc<>+448(SB), Y3, Y7
	VMULPS  Y7, Y6, Y6
	TESTQ   DX, DX
	JEQ     store
	VMULPS  Y0, Y6, Y6

store:
	VMOVUPS Y6, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNE     loop

done:
	VZEROUPPER
	RET

// func siluBackwardAVX2(x, dy, dx *float32, n int)
// dx += dy · s·(1 + x·(1 − s)) with s = sigmoid(x), n a multiple of 8.
// The gradient multiplies 1 − s by x, which would magnify the reciprocal
// estimate's error for large x, so this kernel divides exactly.
TEXT ·siluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ   x+0(FP), SI
	MOVQ   dy+8(FP), BX
	MOVQ   dx+16(FP), DI
	MOVQ   n+24(FP), CX
	SHRQ   $3, CX
	JEQ    bdone
	VXORPS Y15, Y15, Y15

bloop:
	VMOVUPS (SI), Y0
	VSUBPS  Y0, Y15, Y1
	VMINPS  sigc<>+0(SB), Y1, Y1
	VMAXPS  sigc<>+32(SB), Y1, Y1
	VMOVUPS sigc<>+96(SB), Y2
	VFMADD231PS sigc<>+64(SB), Y1, Y2
	VROUNDPS $1, Y2, Y2
	VFNMADD231PS sigc<>+128(SB), Y2, Y1
	VFNMADD231PS sigc<>+160(SB), Y2, Y1
	VMOVUPS sigc<>+192(SB), Y3
	VFMADD213PS sigc<>+224(SB), Y1, Y3
	VFMADD213PS sigc<>+256(SB), Y1, Y3
	VFMADD213PS sigc<>+288(SB), Y1, Y3
	VFMADD213PS sigc<>+320(SB), Y1, Y3
	VFMADD213PS sigc<>+352(SB), Y1, Y3
	VMULPS  Y1, Y1, Y4
	VFMADD213PS Y1, Y4, Y3
	VADDPS  sigc<>+384(SB), Y3, Y3
	VCVTTPS2DQ Y2, Y5
	VPADDD  sigc<>+416(SB), Y5, Y5
	VPSLLD  $23, Y5, Y5
	VMULPS  Y5, Y3, Y3
	VMOVAPS Y3, Y9
	VADDPS  sigc<>+384(SB), Y3, Y3
	VRCPPS  Y3, Y6
	VMOVAPS Y6, Y7
	VFNMADD213PS sigc<>+448(SB), Y3, Y7
	VMULPS  Y7, Y6, Y6
	VMULPS  Y9, Y6, Y7
	VFMADD213PS sigc<>+384(SB), Y0, Y7
	VMULPS  Y6, Y7, Y7
	VMOVUPS (DI), Y8
	VFMADD231PS (BX), Y7, Y8
	VMOVUPS Y8, (DI)
	ADDQ    $32, SI
	ADDQ    $32, BX
	ADDQ    $32, DI
	DECQ    CX
	JNE     bloop

bdone:
	VZEROUPPER
	RET
