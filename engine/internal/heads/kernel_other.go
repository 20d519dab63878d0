//go:build !amd64 || purego

package heads

// hasKernel is false where there is no assembly kernel: gemmNT uses gonum.
const hasKernel = false

func dot2x4(k int, a0, a1, b0, b1, b2, b3 *float32, out *[8]float32) {
	panic("heads: no kernel on this platform")
}
