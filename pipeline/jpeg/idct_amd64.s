//go:build amd64 && !purego

#include "textflag.h"

// Constants of idctGo, each eight times: for rot(x0, x1, kc, ks) the three
// factors kc, ks−kc and kc+ks (a: kc, b: ks−kc, c: kc+ks); r6 is the row
// pass's (1/√2)cos/sin 6π/16 at 18 bits, c6 the column pass's at 12 bits.
#define K_r6a idctk<>+0(SB)
#define K_r6b idctk<>+32(SB)
#define K_r6c idctk<>+64(SB)
#define K_c6a idctk<>+96(SB)
#define K_c6b idctk<>+128(SB)
#define K_c6c idctk<>+160(SB)
#define K_r3a idctk<>+192(SB)
#define K_r3b idctk<>+224(SB)
#define K_r3c idctk<>+256(SB)
#define K_r1a idctk<>+288(SB)
#define K_r1b idctk<>+320(SB)
#define K_r1c idctk<>+352(SB)
#define K_s8 idctk<>+384(SB)
#define K_s14 idctk<>+416(SB)
#define K_half idctk<>+448(SB)
#define K_lvl idctk<>+480(SB)

DATA idctk<>+0(SB)/4, $70936
DATA idctk<>+4(SB)/4, $70936
DATA idctk<>+8(SB)/4, $70936
DATA idctk<>+12(SB)/4, $70936
DATA idctk<>+16(SB)/4, $70936
DATA idctk<>+20(SB)/4, $70936
DATA idctk<>+24(SB)/4, $70936
DATA idctk<>+28(SB)/4, $70936
DATA idctk<>+32(SB)/4, $4294725106
DATA idctk<>+36(SB)/4, $4294725106
DATA idctk<>+40(SB)/4, $4294725106
DATA idctk<>+44(SB)/4, $4294725106
DATA idctk<>+48(SB)/4, $4294725106
DATA idctk<>+52(SB)/4, $4294725106
DATA idctk<>+56(SB)/4, $4294725106
DATA idctk<>+60(SB)/4, $4294725106
DATA idctk<>+64(SB)/4, $4294866978
DATA idctk<>+68(SB)/4, $4294866978
DATA idctk<>+72(SB)/4, $4294866978
DATA idctk<>+76(SB)/4, $4294866978
DATA idctk<>+80(SB)/4, $4294866978
DATA idctk<>+84(SB)/4, $4294866978
DATA idctk<>+88(SB)/4, $4294866978
DATA idctk<>+92(SB)/4, $4294866978
DATA idctk<>+96(SB)/4, $1108
DATA idctk<>+100(SB)/4, $1108
DATA idctk<>+104(SB)/4, $1108
DATA idctk<>+108(SB)/4, $1108
DATA idctk<>+112(SB)/4, $1108
DATA idctk<>+116(SB)/4, $1108
DATA idctk<>+120(SB)/4, $1108
DATA idctk<>+124(SB)/4, $1108
DATA idctk<>+128(SB)/4, $4294963512
DATA idctk<>+132(SB)/4, $4294963512
DATA idctk<>+136(SB)/4, $4294963512
DATA idctk<>+140(SB)/4, $4294963512
DATA idctk<>+144(SB)/4, $4294963512
DATA idctk<>+148(SB)/4, $4294963512
DATA idctk<>+152(SB)/4, $4294963512
DATA idctk<>+156(SB)/4, $4294963512
DATA idctk<>+160(SB)/4, $4294965728
DATA idctk<>+164(SB)/4, $4294965728
DATA idctk<>+168(SB)/4, $4294965728
DATA idctk<>+172(SB)/4, $4294965728
DATA idctk<>+176(SB)/4, $4294965728
DATA idctk<>+180(SB)/4, $4294965728
DATA idctk<>+184(SB)/4, $4294965728
DATA idctk<>+188(SB)/4, $4294965728
DATA idctk<>+192(SB)/4, $3406
DATA idctk<>+196(SB)/4, $3406
DATA idctk<>+200(SB)/4, $3406
DATA idctk<>+204(SB)/4, $3406
DATA idctk<>+208(SB)/4, $3406
DATA idctk<>+212(SB)/4, $3406
DATA idctk<>+216(SB)/4, $3406
DATA idctk<>+220(SB)/4, $3406
DATA idctk<>+224(SB)/4, $4294961614
DATA idctk<>+228(SB)/4, $4294961614
DATA idctk<>+232(SB)/4, $4294961614
DATA idctk<>+236(SB)/4, $4294961614
DATA idctk<>+240(SB)/4, $4294961614
DATA idctk<>+244(SB)/4, $4294961614
DATA idctk<>+248(SB)/4, $4294961614
DATA idctk<>+252(SB)/4, $4294961614
DATA idctk<>+256(SB)/4, $1130
DATA idctk<>+260(SB)/4, $1130
DATA idctk<>+264(SB)/4, $1130
DATA idctk<>+268(SB)/4, $1130
DATA idctk<>+272(SB)/4, $1130
DATA idctk<>+276(SB)/4, $1130
DATA idctk<>+280(SB)/4, $1130
DATA idctk<>+284(SB)/4, $1130
DATA idctk<>+288(SB)/4, $4017
DATA idctk<>+292(SB)/4, $4017
DATA idctk<>+296(SB)/4, $4017
DATA idctk<>+300(SB)/4, $4017
DATA idctk<>+304(SB)/4, $4017
DATA idctk<>+308(SB)/4, $4017
DATA idctk<>+312(SB)/4, $4017
DATA idctk<>+316(SB)/4, $4017
DATA idctk<>+320(SB)/4, $4294962480
DATA idctk<>+324(SB)/4, $4294962480
DATA idctk<>+328(SB)/4, $4294962480
DATA idctk<>+332(SB)/4, $4294962480
DATA idctk<>+336(SB)/4, $4294962480
DATA idctk<>+340(SB)/4, $4294962480
DATA idctk<>+344(SB)/4, $4294962480
DATA idctk<>+348(SB)/4, $4294962480
DATA idctk<>+352(SB)/4, $3218
DATA idctk<>+356(SB)/4, $3218
DATA idctk<>+360(SB)/4, $3218
DATA idctk<>+364(SB)/4, $3218
DATA idctk<>+368(SB)/4, $3218
DATA idctk<>+372(SB)/4, $3218
DATA idctk<>+376(SB)/4, $3218
DATA idctk<>+380(SB)/4, $3218
DATA idctk<>+384(SB)/4, $181
DATA idctk<>+388(SB)/4, $181
DATA idctk<>+392(SB)/4, $181
DATA idctk<>+396(SB)/4, $181
DATA idctk<>+400(SB)/4, $181
DATA idctk<>+404(SB)/4, $181
DATA idctk<>+408(SB)/4, $181
DATA idctk<>+412(SB)/4, $181
DATA idctk<>+416(SB)/4, $11585
DATA idctk<>+420(SB)/4, $11585
DATA idctk<>+424(SB)/4, $11585
DATA idctk<>+428(SB)/4, $11585
DATA idctk<>+432(SB)/4, $11585
DATA idctk<>+436(SB)/4, $11585
DATA idctk<>+440(SB)/4, $11585
DATA idctk<>+444(SB)/4, $11585
DATA idctk<>+448(SB)/4, $524288
DATA idctk<>+452(SB)/4, $524288
DATA idctk<>+456(SB)/4, $524288
DATA idctk<>+460(SB)/4, $524288
DATA idctk<>+464(SB)/4, $524288
DATA idctk<>+468(SB)/4, $524288
DATA idctk<>+472(SB)/4, $524288
DATA idctk<>+476(SB)/4, $524288
DATA idctk<>+480(SB)/4, $128
DATA idctk<>+484(SB)/4, $128
DATA idctk<>+488(SB)/4, $128
DATA idctk<>+492(SB)/4, $128
DATA idctk<>+496(SB)/4, $128
DATA idctk<>+500(SB)/4, $128
DATA idctk<>+504(SB)/4, $128
DATA idctk<>+508(SB)/4, $128
GLOBL idctk<>(SB), RODATA|NOPTR, $512

// a, b = a+b, a−b
#define BFLY(a, b, t) \
	VPSUBD b, a, t; \
	VPADDD b, a, a; \
	VMOVDQA t, b

// x0, x1 = rot(x0, x1, kc, ks): sum = kc(x0+x1); x0' = sum + (ks−kc)x1;
// x1' = sum − (kc+ks)x0
#define ROT(x0, x1, ka, kb, kc, t0, t1) \
	VPADDD x1, x0, t0; \
	VPMULLD ka, t0, t0; \
	VPMULLD kb, x1, t1; \
	VPMULLD kc, x0, x1; \
	VPSUBD x1, t0, x1; \
	VPADDD t1, t0, x0

// The odd half's last stages and the final butterflies of a pass, after
// its 7-point shift sh (rows 2, columns 14).
#define ODDOUT(sh) \
	BFLY(Y9, Y11, Y0); \
	BFLY(Y15, Y13, Y0); \
	VPSRAD sh, Y15, Y15; \
	VPSRAD sh, Y9, Y9; \
	ROT(Y15, Y9, K_r3a, K_r3b, K_r3c, Y0, Y1); \
	VPSRAD sh, Y11, Y11; \
	VPSRAD sh, Y13, Y13; \
	ROT(Y11, Y13, K_r1a, K_r1b, K_r1c, Y0, Y1); \
	BFLY(Y8, Y9, Y0); \
	BFLY(Y12, Y13, Y0); \
	BFLY(Y10, Y11, Y0); \
	BFLY(Y14, Y15, Y0)

// Four rows of samples (dwords, saturated by packing) to dst, dst+stride,
// dst+2·stride, dst+3·stride (SI stride, R8 3·stride): [a | b] and [c | d]
// words, then bytes [a c | b d].
#define STORE4(a, b, c, d) \
	VPACKSSDW b, a, Y1; \
	VPERMQ $0xD8, Y1, Y1; \
	VPACKSSDW d, c, Y2; \
	VPERMQ $0xD8, Y2, Y2; \
	VPACKUSWB Y2, Y1, Y1; \
	VMOVQ X1, (DI); \
	VPEXTRQ $1, X1, (DI)(SI*2); \
	VEXTRACTI128 $1, Y1, X1; \
	VMOVQ X1, (DI)(SI*1); \
	VPEXTRQ $1, X1, (DI)(R8*1)

// Y0..Y7 (rows) → Y8..Y15 (columns)
#define TRANSPOSE \
	VPUNPCKLDQ Y1, Y0, Y8; \
	VPUNPCKHDQ Y1, Y0, Y9; \
	VPUNPCKLDQ Y3, Y2, Y10; \
	VPUNPCKHDQ Y3, Y2, Y11; \
	VPUNPCKLDQ Y5, Y4, Y12; \
	VPUNPCKHDQ Y5, Y4, Y13; \
	VPUNPCKLDQ Y7, Y6, Y14; \
	VPUNPCKHDQ Y7, Y6, Y15; \
	VPUNPCKLQDQ Y10, Y8, Y0; \
	VPUNPCKHQDQ Y10, Y8, Y1; \
	VPUNPCKLQDQ Y11, Y9, Y2; \
	VPUNPCKHQDQ Y11, Y9, Y3; \
	VPUNPCKLQDQ Y14, Y12, Y4; \
	VPUNPCKHQDQ Y14, Y12, Y5; \
	VPUNPCKLQDQ Y15, Y13, Y6; \
	VPUNPCKHQDQ Y15, Y13, Y7; \
	VPERM2I128 $0x20, Y4, Y0, Y8; \
	VPERM2I128 $0x31, Y4, Y0, Y12; \
	VPERM2I128 $0x20, Y5, Y1, Y9; \
	VPERM2I128 $0x31, Y5, Y1, Y13; \
	VPERM2I128 $0x20, Y6, Y2, Y10; \
	VPERM2I128 $0x31, Y6, Y2, Y14; \
	VPERM2I128 $0x20, Y7, Y3, Y11; \
	VPERM2I128 $0x31, Y7, Y3, Y15

// func idctStoreAVX2(b *[64]int32, dst *byte, stride int)
//
// Registers through both passes: x0 Y8, x7 Y9, x2 Y10, x5 Y11, x1 Y12,
// x6 Y13, x3 Y14, x4 Y15 (the input order of a row or column); Y0–Y3 temps.
TEXT ·idctStoreAVX2(SB), NOSPLIT, $0-24
	MOVQ b+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ stride+16(FP), SI
	LEAQ (SI)(SI*2), R8

	VMOVDQU 0(AX), Y0
	VMOVDQU 32(AX), Y1
	VMOVDQU 64(AX), Y2
	VMOVDQU 96(AX), Y3
	VMOVDQU 128(AX), Y4
	VMOVDQU 160(AX), Y5
	VMOVDQU 192(AX), Y6
	VMOVDQU 224(AX), Y7
	TRANSPOSE

	// rows, eight at a time (lane = row)
	VPSLLD $17, Y8, Y8
	VPSLLD $17, Y12, Y12
	BFLY(Y8, Y12, Y0)
	ROT(Y10, Y14, K_r6a, K_r6b, K_r6c, Y0, Y1)
	BFLY(Y12, Y10, Y0)
	BFLY(Y8, Y14, Y0)
	VPSLLD $7, Y15, Y15
	VPSLLD $7, Y9, Y9
	BFLY(Y9, Y15, Y0)
	VPMULLD K_s8, Y13, Y13
	VPMULLD K_s8, Y11, Y11
	ODDOUT($2)

	// outputs 0..7 of each row back to rows of the block
	VMOVDQA Y8, Y0
	VMOVDQA Y12, Y1
	VMOVDQA Y10, Y2
	VMOVDQA Y14, Y3
	VMOVDQA Y15, Y4
	VMOVDQA Y11, Y5
	VMOVDQA Y13, Y6
	VMOVDQA Y9, Y7
	TRANSPOSE

	// columns, eight at a time (lane = column)
	VPADDD K_half, Y8, Y8
	BFLY(Y8, Y12, Y0)
	VPSRAD $2, Y8, Y8
	VPSRAD $2, Y12, Y12
	VPSRAD $13, Y10, Y10
	VPSRAD $13, Y14, Y14
	ROT(Y10, Y14, K_c6a, K_c6b, K_c6c, Y0, Y1)
	BFLY(Y12, Y10, Y0)
	BFLY(Y8, Y14, Y0)
	BFLY(Y9, Y15, Y0)
	VPSRAD $13, Y11, Y11
	VPMULLD K_s14, Y11, Y11
	VPSRAD $13, Y13, Y13
	VPMULLD K_s14, Y13, Y13
	ODDOUT($14)

	// rows 0..7 are Y8 Y12 Y10 Y14 Y15 Y11 Y13 Y9: >>18, +128, saturate
	VMOVDQU K_lvl, Y0
	VPSRAD $18, Y8, Y8
	VPADDD Y0, Y8, Y8
	VPSRAD $18, Y12, Y12
	VPADDD Y0, Y12, Y12
	VPSRAD $18, Y10, Y10
	VPADDD Y0, Y10, Y10
	VPSRAD $18, Y14, Y14
	VPADDD Y0, Y14, Y14
	VPSRAD $18, Y15, Y15
	VPADDD Y0, Y15, Y15
	VPSRAD $18, Y11, Y11
	VPADDD Y0, Y11, Y11
	VPSRAD $18, Y13, Y13
	VPADDD Y0, Y13, Y13
	VPSRAD $18, Y9, Y9
	VPADDD Y0, Y9, Y9

	STORE4(Y8, Y12, Y10, Y14)
	LEAQ (DI)(SI*4), DI

	STORE4(Y15, Y11, Y13, Y9)

	VZEROUPPER
	RET
