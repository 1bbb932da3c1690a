//go:build amd64 && !purego

#include "textflag.h"

// Lane order for the 64-bit coefficient gathers: pixels 0,2,4,6 in the low
// half, 1,3,5,7 in the high half, so that the two gathered vectors of
// products interleave back into pixel order with one dword blend.
DATA evenodd<>+0(SB)/4, $0
DATA evenodd<>+4(SB)/4, $2
DATA evenodd<>+8(SB)/4, $4
DATA evenodd<>+12(SB)/4, $6
DATA evenodd<>+16(SB)/4, $1
DATA evenodd<>+20(SB)/4, $3
DATA evenodd<>+24(SB)/4, $5
DATA evenodd<>+28(SB)/4, $7
GLOBL evenodd<>(SB), RODATA|NOPTR, $32

// Lane numbers 0-15 (the AVX2 kernels load the first eight).
DATA iota16<>+0(SB)/4, $0
DATA iota16<>+4(SB)/4, $1
DATA iota16<>+8(SB)/4, $2
DATA iota16<>+12(SB)/4, $3
DATA iota16<>+16(SB)/4, $4
DATA iota16<>+20(SB)/4, $5
DATA iota16<>+24(SB)/4, $6
DATA iota16<>+28(SB)/4, $7
DATA iota16<>+32(SB)/4, $8
DATA iota16<>+36(SB)/4, $9
DATA iota16<>+40(SB)/4, $10
DATA iota16<>+44(SB)/4, $11
DATA iota16<>+48(SB)/4, $12
DATA iota16<>+52(SB)/4, $13
DATA iota16<>+56(SB)/4, $14
DATA iota16<>+60(SB)/4, $15
GLOBL iota16<>(SB), RODATA|NOPTR, $64

// Eight pixels' R, G, B (dwords ≤ 255) to the planes at AX, BX, CX: bytes
// [R0-7 B0-7 | G0-7 B0-7] in t0 (tx: its low half; t1 scratch).
#define PACKSTORE(r, g, b, t0, tx, t1) \
	VPACKUSDW g, r, t0; \
	VPERMQ $0xD8, t0, t0; \
	VPACKUSDW b, b, t1; \
	VPERMQ $0xD8, t1, t1; \
	VPACKUSWB t1, t0, t0; \
	VMOVQ tx, (AX); \
	VPEXTRQ $1, tx, (CX); \
	VEXTRACTI128 $1, t0, tx; \
	VMOVQ tx, (BX)

// 255·4096 and 180·4096/6 as float32: the numerators of sdiv and hdiv.
DATA sdivnum<>+0(SB)/4, $1044480.0
GLOBL sdivnum<>(SB), RODATA|NOPTR, $4
DATA hdivnum<>+0(SB)/4, $122880.0
GLOBL hdivnum<>(SB), RODATA|NOPTR, $4

// func hsvRowAVX2(rp, gp, bp *uint8, n int, t *hsvTable)
TEXT ·hsvRowAVX2(SB), NOSPLIT, $0-40
	MOVQ rp+0(FP), AX
	MOVQ gp+8(FP), BX
	MOVQ bp+16(FP), CX
	MOVQ n+24(FP), DX
	MOVQ t+32(FP), SI

	MOVL $2048, R9
	MOVQ R9, X15
	VPBROADCASTD X15, Y15 // rounding half of 12-bit fixed point
	MOVL $180, R9
	MOVQ R9, X14
	VPBROADCASTD X14, Y14
	MOVL $255, R9
	MOVQ R9, X13
	VPBROADCASTD X13, Y13
	VMOVDQU evenodd<>(SB), Y12
	MOVQ $0x0020000100000800, R9 // coefRound
	MOVQ R9, X11
	VPBROADCASTQ X11, Y11
	VPCMPEQD Y10, Y10, Y10 // gather mask: all lanes

loop:
	VPMOVZXBD (AX), Y0 // r
	VPMOVZXBD (BX), Y1 // g
	VPMOVZXBD (CX), Y2 // b
	VPMAXSD Y1, Y0, Y3
	VPMAXSD Y2, Y3, Y3 // v
	VPMINSD Y1, Y0, Y4
	VPMINSD Y2, Y4, Y4
	VPSUBD Y4, Y3, Y4 // diff

	// s = (diff·sdiv[v] + 2048) >> 12, sdiv[v] = round(255·4096/v) by a
	// float division (correctly rounded, and no quotient lies within its
	// error of a half: the same integers as the table; v = 0 gives a
	// garbage divisor times diff = 0)
	VBROADCASTSS sdivnum<>(SB), Y7
	VCVTDQ2PS Y3, Y5
	VDIVPS Y5, Y7, Y5
	VCVTPS2DQ Y5, Y5
	VPMULLD Y4, Y5, Y5
	VPADDD Y15, Y5, Y5
	VPSRAD $12, Y5, Y5

	// hue numerator: v==r ? g-b : v==g ? b-r+2diff : r-g+4diff
	VPSUBD Y2, Y1, Y6
	VPSUBD Y0, Y2, Y7
	VPADDD Y4, Y7, Y7
	VPADDD Y4, Y7, Y7
	VPSUBD Y1, Y0, Y8
	VPSLLD $2, Y4, Y9
	VPADDD Y9, Y8, Y8
	VPCMPEQD Y1, Y3, Y9
	VPBLENDVB Y9, Y7, Y8, Y8
	VPCMPEQD Y0, Y3, Y9
	VPBLENDVB Y9, Y6, Y8, Y8

	// h = (h·hdiv[diff] + 2048) >> 12, wrapped into [0, 180);
	// hdiv[diff] = round(180·4096/(6·diff)) by division as above
	VBROADCASTSS hdivnum<>(SB), Y6
	VCVTDQ2PS Y4, Y7
	VDIVPS Y7, Y6, Y7
	VCVTPS2DQ Y7, Y7
	VPMULLD Y7, Y8, Y8
	VPADDD Y15, Y8, Y8
	VPSRAD $12, Y8, Y8
	VPSRAD $31, Y8, Y7
	VPAND Y14, Y7, Y7
	VPADDD Y7, Y8, Y8

	// coefficient index h<<8 | s&255
	VPSLLD $8, Y8, Y8
	VPAND Y13, Y5, Y5
	VPOR Y5, Y8, Y8

	// v' = t.v[v]
	VMOVDQU Y10, Y9
	VPGATHERDD Y9, (SI)(Y3*1), Y6
	VPAND Y13, Y6, Y6

	VPERMD Y8, Y12, Y8
	VPERMD Y6, Y12, Y6

	// coefficients of pixels 0,2,4,6 (Y0) and 1,3,5,7 (Y1)
	VMOVDQU Y10, Y9
	VPGATHERDQ Y9, 256(SI)(X8*8), Y0
	VEXTRACTI128 $1, Y8, X8
	VMOVDQU Y10, Y9
	VPGATHERDQ Y9, 256(SI)(X8*8), Y1

	// p = v'·coef + coefRound, 64-bit (v' < 2^8, coef < 2^55)
	VPMOVZXDQ X6, Y2
	VEXTRACTI128 $1, Y6, X6
	VPMOVZXDQ X6, Y3
	VPMULUDQ Y2, Y0, Y4
	VPSRLQ $32, Y0, Y0
	VPMULUDQ Y2, Y0, Y0
	VPSLLQ $32, Y0, Y0
	VPADDQ Y4, Y0, Y0
	VPADDQ Y11, Y0, Y0
	VPMULUDQ Y3, Y1, Y4
	VPSRLQ $32, Y1, Y1
	VPMULUDQ Y3, Y1, Y1
	VPSLLQ $32, Y1, Y1
	VPADDQ Y4, Y1, Y1
	VPADDQ Y11, Y1, Y1

	// channels: bits 12, 33, 54 of p; even pixels into even dwords, odd
	// pixels into odd dwords
	VPSRLQ $12, Y0, Y4
	VPSLLQ $20, Y1, Y7
	VPBLENDD $0xAA, Y7, Y4, Y4
	VPAND Y13, Y4, Y4 // R
	VPSRLQ $33, Y0, Y5
	VPSRLQ $1, Y1, Y7
	VPBLENDD $0xAA, Y7, Y5, Y5
	VPAND Y13, Y5, Y5 // G
	VPSRLQ $54, Y0, Y6
	VPSRLQ $22, Y1, Y7
	VPBLENDD $0xAA, Y7, Y6, Y6
	VPAND Y13, Y6, Y6 // B

	PACKSTORE(Y4, Y5, Y6, Y7, X7, Y8)

	ADDQ $8, AX
	ADDQ $8, BX
	ADDQ $8, CX
	SUBQ $8, DX
	JNZ loop
	VZEROUPPER
	RET

// func vblendAVX2(dst *uint32, top, bot *uint8, n int, iy, wy uint32)
TEXT ·vblendAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ top+8(FP), SI
	MOVQ bot+16(FP), BX
	MOVQ n+24(FP), DX
	MOVL iy+32(FP), AX
	MOVQ AX, X15
	VPBROADCASTW X15, Y15
	MOVL wy+36(FP), AX
	MOVQ AX, X14
	VPBROADCASTW X14, Y14
	MOVL $0x8000, AX
	MOVQ AX, X13
	VPBROADCASTW X13, Y13

vloop:
	// 16 pairs a step in 16-bit lanes: top·iy + bot·wy ≤ 255·256, minus
	// 32768, at k (Y0) and k+3 (Y2), interleaved into (k, k+3) pairs
	VPMOVZXBW (SI), Y0
	VPMOVZXBW (BX), Y1
	VPMULLW Y15, Y0, Y0
	VPMULLW Y14, Y1, Y1
	VPADDW Y1, Y0, Y0
	VPXOR Y13, Y0, Y0
	VPMOVZXBW 3(SI), Y2
	VPMOVZXBW 3(BX), Y3
	VPMULLW Y15, Y2, Y2
	VPMULLW Y14, Y3, Y3
	VPADDW Y3, Y2, Y2
	VPXOR Y13, Y2, Y2
	VPUNPCKLWD Y2, Y0, Y4 // pairs 0-3 | 8-11
	VPUNPCKHWD Y2, Y0, Y5 // pairs 4-7 | 12-15
	VPERM2I128 $0x20, Y5, Y4, Y6
	VPERM2I128 $0x31, Y5, Y4, Y7
	VMOVDQU Y6, (DI)
	VMOVDQU Y7, 32(DI)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $64, DI
	SUBQ $16, DX
	JNZ vloop
	VZEROUPPER
	RET

// One channel of hsampleAVX2's eight pixels into dst: the word pairs at
// pair indices Y0 plus off bytes, multiply-added with the weight pairs Y3
// (ix, wx), the offsets of the stored values and the rounding half added
// back (Y7), shifted; Y4 is the gather mask.
#define CHANNEL(off, dst) \
	VMOVDQU Y10, Y4; \
	VPGATHERDD Y4, off(SI)(Y0*4), dst; \
	VPMADDWD Y3, dst, dst; \
	VPADDD Y7, dst, dst; \
	VPSRLD $16, dst, dst

// func hsampleAVX2(rp, gp, bp *uint8, n int, sc *uint32, u0, du, last int32)
TEXT ·hsampleAVX2(SB), NOSPLIT, $0-52
	MOVQ rp+0(FP), AX
	MOVQ gp+8(FP), BX
	MOVQ bp+16(FP), CX
	MOVQ n+24(FP), DX
	MOVQ sc+32(FP), SI

	MOVL du+44(FP), R9
	MOVQ R9, X14
	VPBROADCASTD X14, Y14
	VMOVDQU iota16<>(SB), Y15
	VPMULLD Y14, Y15, Y15
	MOVL u0+40(FP), R9
	MOVQ R9, X13
	VPBROADCASTD X13, Y13
	VPADDD Y13, Y15, Y15 // lane positions u0 + i·du
	VPSLLD $3, Y14, Y14  // step 8·du
	MOVL last+48(FP), R9
	MOVQ R9, X12
	VPBROADCASTD X12, Y12
	VPXOR Y11, Y11, Y11
	VPCMPEQD Y10, Y10, Y10 // all ones: gather mask, and −1
	MOVL $255, R9
	MOVQ R9, X9
	VPBROADCASTD X9, Y9
	MOVL $256, R9
	MOVQ R9, X8
	VPBROADCASTD X8, Y8
	MOVL $0x808000, R9 // 32768·256 + 32768
	MOVQ R9, X7
	VPBROADCASTD X7, Y7

hloop:
	// pair index of the left tap: (u>>16) + 1 clamped to [0, last], as a
	// dword offset 3·index into sc
	VPSRAD $16, Y15, Y0
	VPSUBD Y10, Y0, Y0
	VPMAXSD Y11, Y0, Y0
	VPMINSD Y12, Y0, Y0
	VPADDD Y0, Y0, Y1
	VPADDD Y1, Y0, Y0

	// weight pairs: low word ix = 256 − wx, high word wx = (u>>8)&255
	VPSRLD $8, Y15, Y2
	VPAND Y9, Y2, Y2
	VPSLLD $16, Y2, Y3
	VPSUBD Y2, Y3, Y3
	VPADDD Y8, Y3, Y3

	CHANNEL(8, Y1) // B

	// R and G: their pairs are adjacent, so one qword gather per pixel
	// reads both (16 gathered elements per 8 pixels instead of 24);
	// even dwords are R's, odd G's, put back in pixel order
	VMOVDQU Y10, Y4
	VPGATHERDQ Y4, (SI)(X0*4), Y5 // pixels 0-3
	VEXTRACTI128 $1, Y0, X2
	VMOVDQU Y10, Y4
	VPGATHERDQ Y4, (SI)(X2*4), Y6 // pixels 4-7
	VSHUFPS $0xDD, Y6, Y5, Y2     // G 0 1 4 5 | 2 3 6 7
	VSHUFPS $0x88, Y6, Y5, Y5     // R
	VPERMQ $0xD8, Y2, Y6
	VPERMQ $0xD8, Y5, Y5
	VPMADDWD Y3, Y5, Y5
	VPADDD Y7, Y5, Y5
	VPSRLD $16, Y5, Y5
	VPMADDWD Y3, Y6, Y6
	VPADDD Y7, Y6, Y6
	VPSRLD $16, Y6, Y6

	PACKSTORE(Y5, Y6, Y1, Y0, X0, Y2)

	VPADDD Y14, Y15, Y15
	ADDQ $8, AX
	ADDQ $8, BX
	ADDQ $8, CX
	SUBQ $8, DX
	JNZ hloop
	VZEROUPPER
	RET

// One channel of hsampleAVX512's sixteen pixels into dst: the pairs at
// window indices j (< 96) picked from the window Z0-Z5 (three VPERMI2D
// over its register pairs, merged by j's range), multiply-added with the
// weight pairs Z8, the offsets and rounding half added back, shifted and
// stored as bytes.
#define CHAN16(j, dst) \
	VMOVDQA32 j, Z10; \
	VPERMI2D Z1, Z0, Z10; \
	VMOVDQA32 j, Z12; \
	VPERMI2D Z3, Z2, Z12; \
	VMOVDQA32 j, Z13; \
	VPERMI2D Z5, Z4, Z13; \
	VPCMPUD $5, Z23, j, K1; \
	VMOVDQA32 Z12, K1, Z10; \
	VPCMPUD $5, Z22, j, K2; \
	VMOVDQA32 Z13, K2, Z10; \
	VPMADDWD Z8, Z10, Z10; \
	VPADDD Z24, Z10, Z10; \
	VPSRLD $16, Z10, Z10; \
	VPMOVDB Z10, (dst)

// func hsampleAVX512(rp, gp, bp *uint8, n int, sc *uint32, u0, du, last int32)
//
// hsampleAVX2's pixels sixteen a step without gathers: the sixteen left
// taps of a step lie within 32 pairs of each other (|du| ≤ 2), so the
// step loads the 96 dwords of those pairs from sc once (six registers,
// starting at the smallest tap) and picks each channel's pairs from them
// with register permutes. sc must be readable for 96 dwords from any
// pair index ≤ last, i.e. 93 dwords past the row.
TEXT ·hsampleAVX512(SB), NOSPLIT, $0-52
	MOVQ rp+0(FP), AX
	MOVQ gp+8(FP), BX
	MOVQ bp+16(FP), CX
	MOVQ n+24(FP), DX
	MOVQ sc+32(FP), SI

	MOVL du+44(FP), R9
	VPBROADCASTD R9, Z30
	VMOVDQU32 iota16<>(SB), Z31
	VPMULLD Z30, Z31, Z31
	MOVL u0+40(FP), R9
	VPBROADCASTD R9, Z29
	VPADDD Z29, Z31, Z31 // lane positions u0 + i·du
	VPSLLD $4, Z30, Z30  // step 16·du
	MOVL last+48(FP), R9
	VPBROADCASTD R9, Z29
	VPXORD Z28, Z28, Z28
	VPTERNLOGD $0xFF, Z27, Z27, Z27 // −1
	MOVL $255, R9
	VPBROADCASTD R9, Z26
	MOVL $256, R9
	VPBROADCASTD R9, Z25
	MOVL $0x808000, R9 // 32768·256 + 32768
	VPBROADCASTD R9, Z24
	MOVL $32, R9
	VPBROADCASTD R9, Z23
	MOVL $64, R9
	VPBROADCASTD R9, Z22
	MOVL $15, R9
	VPBROADCASTD R9, Z21
	MOVL $1, R9
	VPBROADCASTD R9, Z20

h16loop:
	// pair index of the left tap, (u>>16) + 1 clamped to [0, last]
	VPSRAD $16, Z31, Z6
	VPSUBD Z27, Z6, Z6
	VPMAXSD Z28, Z6, Z6
	VPMINSD Z29, Z6, Z6

	// weight pairs: low word 256 − wx, high word wx = (u>>8)&255
	VPSRLD $8, Z31, Z7
	VPANDD Z26, Z7, Z7
	VPSLLD $16, Z7, Z8
	VPSUBD Z7, Z8, Z8
	VPADDD Z25, Z8, Z8

	// the window starts at the smallest index (lane 0, or lane 15 when
	// stepping backwards); j = 3·(index − start) for R, +1 G, +2 B
	VPERMD Z6, Z28, Z9
	VPERMD Z6, Z21, Z7
	VPMINSD Z7, Z9, Z9
	VMOVD X9, R10
	VPSUBD Z9, Z6, Z6
	VPADDD Z6, Z6, Z7
	VPADDD Z7, Z6, Z6
	LEAQ (R10)(R10*2), R11
	LEAQ (SI)(R11*4), R11
	VMOVDQU32 0(R11), Z0
	VMOVDQU32 64(R11), Z1
	VMOVDQU32 128(R11), Z2
	VMOVDQU32 192(R11), Z3
	VMOVDQU32 256(R11), Z4
	VMOVDQU32 320(R11), Z5

	CHAN16(Z6, AX)
	VPADDD Z20, Z6, Z6
	CHAN16(Z6, BX)
	VPADDD Z20, Z6, Z6
	CHAN16(Z6, CX)

	VPADDD Z30, Z31, Z31
	ADDQ $16, AX
	ADDQ $16, BX
	ADDQ $16, CX
	SUBQ $16, DX
	JNZ h16loop
	VZEROUPPER
	RET

DATA coefconst<>+0(SB)/4, $1.0
DATA coefconst<>+4(SB)/4, $4096.0
DATA coefconst<>+8(SB)/4, $0.5
DATA coefconst<>+12(SB)/4, $4096
GLOBL coefconst<>(SB), RODATA|NOPTR, $16

// One coefficient's eight dwords (c) into the qword accumulators lo and
// hi (saturations 0-3 and 4-7 of the step), shifted by the count in sh;
// t is scratch.
#define COEFFIELD(c, cx, sh, lo, hi, t) \
	VPMOVZXDQ cx, t; \
	VPSLLQ sh, t, t; \
	VPOR t, lo, lo; \
	VEXTRACTI128 $1, c, cx; \
	VPMOVZXDQ cx, t; \
	VPSLLQ sh, t, t; \
	VPOR t, hi, hi

// c = trunc((1 − sf·f)·4096 + 0.5), each operation rounded to float32 as
// coefRowGo's.
#define COEFFRAC(sf, f, c) \
	VMULPS f, sf, c; \
	VSUBPS c, Y13, c; \
	VMULPS Y12, c, c; \
	VADDPS Y11, c, c; \
	VCVTTPS2DQ c, c

// func coefRowAVX2(row *uint64, k *coefInputs, hf, hf1 float32, sh *[4]uint64)
TEXT ·coefRowAVX2(SB), NOSPLIT, $0-32
	MOVQ row+0(FP), DI
	MOVQ k+8(FP), SI
	VBROADCASTSS hf+16(FP), Y15
	VBROADCASTSS hf1+20(FP), Y14
	MOVQ sh+24(FP), AX
	VBROADCASTSS coefconst<>+0(SB), Y13
	VBROADCASTSS coefconst<>+4(SB), Y12
	VBROADCASTSS coefconst<>+8(SB), Y11
	VPBROADCASTD coefconst<>+12(SB), Y10
	VMOVQ 0(AX), X9
	VMOVQ 8(AX), X8
	VMOVQ 16(AX), X7
	VMOVQ 24(AX), X6
	// The constant coefficient one, shifted, is the same in every entry.
	VPMOVZXDQ X10, Y5
	VPSLLQ X9, Y5, Y5
	MOVQ $32, CX

crow:
	VMOVDQU (SI), Y0     // sf
	VMOVDQU 1024(SI), Y1 // minc
	COEFFRAC(Y0, Y15, Y2)
	COEFFRAC(Y0, Y14, Y3)
	VMOVDQU Y5, Y0
	VMOVDQU Y5, Y4
	COEFFIELD(Y1, X1, X8, Y0, Y4, Y9)
	COEFFIELD(Y2, X2, X7, Y0, Y4, Y9)
	COEFFIELD(Y3, X3, X6, Y0, Y4, Y9)
	VMOVDQU Y0, (DI)
	VMOVDQU Y4, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ crow
	VZEROUPPER
	RET

// func hsvRowAVX512(rp, gp, bp *uint8, n int, t *hsvTable)
//
// hsvRowAVX2's arithmetic sixteen pixels a step in dword lanes, with two
// differences that remove work rather than widen it: t.v is looked up
// from registers (VPERMI2B over its 256 bytes) instead of by a gather,
// and the coefficients are gathered in pixel order, so the channels are
// stored straight from the products (VPMOVQB) without interleaving. The
// last n mod 16 pixels are one more step under a mask (loads and stores
// of the lanes past n suppressed; those lanes compute on zeros).
TEXT ·hsvRowAVX512(SB), NOSPLIT, $0-40
	MOVQ rp+0(FP), AX
	MOVQ gp+8(FP), BX
	MOVQ bp+16(FP), CX
	MOVQ n+24(FP), DX
	MOVQ t+32(FP), SI

	// t.v in four registers: bytes 0-63, 64-127, 128-191, 192-255
	VMOVDQU64 0(SI), Z28
	VMOVDQU64 64(SI), Z29
	VMOVDQU64 128(SI), Z30
	VMOVDQU64 192(SI), Z31
	MOVL $2048, R9
	VPBROADCASTD R9, Z27 // rounding half of 12-bit fixed point
	MOVL $180, R9
	VPBROADCASTD R9, Z26
	MOVL $255, R9
	VPBROADCASTD R9, Z25
	MOVL $128, R9
	VPBROADCASTD R9, Z24
	MOVQ $0x0020000100000800, R9 // coefRound
	VPBROADCASTQ R9, Z23
	VBROADCASTSS sdivnum<>(SB), Z22
	VBROADCASTSS hdivnum<>(SB), Z21

loop512:
	// lane masks: all sixteen, or the n < 16 left (K6; K7 its upper half)
	KXNORW K0, K0, K6
	CMPQ DX, $16
	JAE full512
	MOVQ CX, R12
	MOVQ DX, CX
	MOVL $1, R10
	SHLL CX, R10
	DECL R10
	MOVQ R12, CX
	KMOVW R10, K6

full512:
	KSHIFTRW $8, K6, K7
	VPMOVZXBD.Z (AX), K6, Z0 // r
	VPMOVZXBD.Z (BX), K6, Z1 // g
	VPMOVZXBD.Z (CX), K6, Z2 // b
	VPMAXSD Z1, Z0, Z3
	VPMAXSD Z2, Z3, Z3 // v
	VPMINSD Z1, Z0, Z4
	VPMINSD Z2, Z4, Z4
	VPSUBD Z4, Z3, Z4 // diff

	// s = (diff·sdiv[v] + 2048) >> 12, sdiv by division (see hsvRowAVX2)
	VCVTDQ2PS Z3, Z5
	VDIVPS Z5, Z22, Z5
	VCVTPS2DQ Z5, Z5
	VPMULLD Z4, Z5, Z5
	VPADDD Z27, Z5, Z5
	VPSRAD $12, Z5, Z5

	// hue numerator: v==r ? g-b : v==g ? b-r+2diff : r-g+4diff
	VPSUBD Z1, Z0, Z8
	VPSLLD $2, Z4, Z9
	VPADDD Z9, Z8, Z8
	VPSUBD Z0, Z2, Z7
	VPADDD Z4, Z7, Z7
	VPADDD Z4, Z7, Z7
	VPCMPEQD Z1, Z3, K2
	VMOVDQA32 Z7, K2, Z8
	VPSUBD Z2, Z1, Z6
	VPCMPEQD Z0, Z3, K3
	VMOVDQA32 Z6, K3, Z8

	// h = (h·hdiv[diff] + 2048) >> 12, wrapped into [0, 180)
	VCVTDQ2PS Z4, Z7
	VDIVPS Z7, Z21, Z7
	VCVTPS2DQ Z7, Z7
	VPMULLD Z7, Z8, Z8
	VPADDD Z27, Z8, Z8
	VPSRAD $12, Z8, Z8
	VPMOVD2M Z8, K4
	VPADDD Z26, Z8, K4, Z8

	// coefficient index h<<8 | s&255 (ternary logic: A | (B & C))
	VPSLLD $8, Z8, Z8
	VPTERNLOGD $0xF8, Z25, Z5, Z8

	// v' = t.v[v] from registers: bytes v&127 of both halves, the upper
	// half's where bit 7 is set; the index's zero bytes look up t.v[0],
	// cleared by the mask
	VMOVDQA64 Z3, Z6
	VPERMI2B Z29, Z28, Z6
	VMOVDQA64 Z3, Z7
	VPERMI2B Z31, Z30, Z7
	VPTESTMD Z24, Z3, K5
	VMOVDQA32 Z7, K5, Z6
	VPANDD Z25, Z6, Z6

	// coefficients of pixels 0-7 (Z0) and 8-15 (Z1)
	KXNORW K0, K0, K1
	VPGATHERDQ 256(SI)(Y8*8), K1, Z0
	VEXTRACTI64X4 $1, Z8, Y9
	KXNORW K0, K0, K1
	VPGATHERDQ 256(SI)(Y9*8), K1, Z1

	// p = v'·coef + coefRound, 64-bit
	VPMOVZXDQ Y6, Z2
	VEXTRACTI64X4 $1, Z6, Y6
	VPMOVZXDQ Y6, Z3
	VPMULLQ Z2, Z0, Z0
	VPADDQ Z23, Z0, Z0
	VPMULLQ Z3, Z1, Z1
	VPADDQ Z23, Z1, Z1

	// channels: the low bytes of p>>12, p>>33, p>>54
	VPSRLQ $12, Z0, Z4
	VPMOVQB Z4, K6, (AX)
	VPSRLQ $12, Z1, Z4
	VPMOVQB Z4, K7, 8(AX)
	VPSRLQ $33, Z0, Z4
	VPMOVQB Z4, K6, (BX)
	VPSRLQ $33, Z1, Z4
	VPMOVQB Z4, K7, 8(BX)
	VPSRLQ $54, Z0, Z4
	VPMOVQB Z4, K6, (CX)
	VPSRLQ $54, Z1, Z4
	VPMOVQB Z4, K7, 8(CX)

	ADDQ $16, AX
	ADDQ $16, BX
	ADDQ $16, CX
	SUBQ $16, DX
	JG loop512
	VZEROUPPER
	RET

// qword orders that interleave the (k, k+3) pairs of VPUNPCKLWD (Z4: pairs
// 0-3 | 8-11 | 16-19 | 24-27) and VPUNPCKHWD (Z5: 4-7 | 12-15 | ...) back
// into pair order: pairs 0-15, then 16-31
DATA pairsLo<>+0(SB)/8, $0
DATA pairsLo<>+8(SB)/8, $1
DATA pairsLo<>+16(SB)/8, $8
DATA pairsLo<>+24(SB)/8, $9
DATA pairsLo<>+32(SB)/8, $2
DATA pairsLo<>+40(SB)/8, $3
DATA pairsLo<>+48(SB)/8, $10
DATA pairsLo<>+56(SB)/8, $11
GLOBL pairsLo<>(SB), RODATA|NOPTR, $64
DATA pairsHi<>+0(SB)/8, $4
DATA pairsHi<>+8(SB)/8, $5
DATA pairsHi<>+16(SB)/8, $12
DATA pairsHi<>+24(SB)/8, $13
DATA pairsHi<>+32(SB)/8, $6
DATA pairsHi<>+40(SB)/8, $7
DATA pairsHi<>+48(SB)/8, $14
DATA pairsHi<>+56(SB)/8, $15
GLOBL pairsHi<>(SB), RODATA|NOPTR, $64

// func vblendAVX512(dst *uint32, top, bot *uint8, n int, iy, wy uint32)
//
// vblendAVX2 32 pairs a step, the last n mod 32 under a mask (loads and
// stores past n suppressed).
TEXT ·vblendAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ top+8(FP), SI
	MOVQ bot+16(FP), BX
	MOVQ n+24(FP), DX
	MOVL iy+32(FP), AX
	VPBROADCASTW AX, Z15
	MOVL wy+36(FP), AX
	VPBROADCASTW AX, Z14
	MOVL $0x8000, AX
	VPBROADCASTW AX, Z13
	VMOVDQU64 pairsLo<>(SB), Z12
	VMOVDQU64 pairsHi<>(SB), Z11

vloop512:
	// lane masks: all 32 pairs, or the n < 32 left (K1; K2 and K3 the
	// two halves' 16 dwords)
	KXNORD K0, K0, K1
	CMPQ DX, $32
	JAE vfull512
	MOVQ DX, CX
	MOVL $1, R10
	SHLL CX, R10
	DECL R10
	KMOVD R10, K1

vfull512:
	KSHIFTRD $16, K1, K3
	KMOVW K1, K2
	VPMOVZXBW.Z (SI), K1, Z0
	VPMOVZXBW.Z (BX), K1, Z1
	VPMULLW Z15, Z0, Z0
	VPMULLW Z14, Z1, Z1
	VPADDW Z1, Z0, Z0
	VPXORD Z13, Z0, Z0
	VPMOVZXBW.Z 3(SI), K1, Z2
	VPMOVZXBW.Z 3(BX), K1, Z3
	VPMULLW Z15, Z2, Z2
	VPMULLW Z14, Z3, Z3
	VPADDW Z3, Z2, Z2
	VPXORD Z13, Z2, Z2
	VPUNPCKLWD Z2, Z0, Z4
	VPUNPCKHWD Z2, Z0, Z5
	VMOVDQA64 Z12, Z6
	VPERMI2Q Z5, Z4, Z6
	VMOVDQA64 Z11, Z7
	VPERMI2Q Z5, Z4, Z7
	VMOVDQU32 Z6, K2, (DI)
	VMOVDQU32 Z7, K3, 64(DI)
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $128, DI
	SUBQ $32, DX
	JG vloop512
	VZEROUPPER
	RET
