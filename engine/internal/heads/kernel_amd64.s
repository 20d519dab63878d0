//go:build !purego

#include "textflag.h"

// func dot2x4(k int, a0, a1, b0, b1, b2, b3 *float32, out *[8]float32)
//
// out[i*4+j] = sum over the first k values (k a multiple of 8) of a_i*b_j.
// Eight accumulators (two rows of A times four of B) keep both FMA ports
// busy through the four-cycle FMA latency; 14 of the 16 YMM registers.
TEXT ·dot2x4(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a0+8(FP), SI
	MOVQ a1+16(FP), DI
	MOVQ b0+24(FP), R8
	MOVQ b1+32(FP), R9
	MOVQ b2+40(FP), R10
	MOVQ b3+48(FP), R11
	MOVQ out+56(FP), DX

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

	SHLQ $2, CX // bytes
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  reduce
	VMOVUPS     (SI)(AX*1), Y8
	VMOVUPS     (DI)(AX*1), Y9
	VMOVUPS     (R8)(AX*1), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VMOVUPS     (R9)(AX*1), Y11
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS     (R10)(AX*1), Y12
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y12, Y9, Y6
	VMOVUPS     (R11)(AX*1), Y13
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y13, Y9, Y7
	ADDQ        $32, AX
	JMP         loop

reduce:
	// Pairwise horizontal adds turn the eight 8-lane sums into one
	// vector of eight totals: a0 x b0..b3, then a1 x b0..b3.
	VHADDPS    Y1, Y0, Y8
	VHADDPS    Y3, Y2, Y9
	VHADDPS    Y5, Y4, Y10
	VHADDPS    Y7, Y6, Y11
	VHADDPS    Y9, Y8, Y8
	VHADDPS    Y11, Y10, Y10
	VPERM2F128 $0x20, Y10, Y8, Y12
	VPERM2F128 $0x31, Y10, Y8, Y13
	VADDPS     Y13, Y12, Y12
	VMOVUPS    Y12, (DX)
	VZEROUPPER
	RET
