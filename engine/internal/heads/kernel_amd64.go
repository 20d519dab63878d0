//go:build !purego

package heads

import "golang.org/x/sys/cpu"

// hasKernel reports whether this CPU runs the AVX2+FMA kernel.
var hasKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot2x4 sets out[i*4+j] to the inner product of the first k values of
// a_i and b_j, for k a multiple of 8 (kernel_amd64.s).
//
//go:noescape
func dot2x4(k int, a0, a1, b0, b1, b2, b3 *float32, out *[8]float32)
