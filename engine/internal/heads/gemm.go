package heads

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// useKernel chooses the assembly kernel over gonum; tests turn it off to
// check the portable path on the same machine.
var useKernel = hasKernel

// gemmNT adds a (m x k) times b (n x k) transposed to c (m x n, row stride
// ldc). Callers keep m and n within a tile (see tileRows), which keeps
// gonum serial.
//
// gonum's float32 GEMM is portable but does one SSE dot product per
// output value, without FMA or register blocking; on x86-64 with AVX2 the
// 2x4 kernel runs several times faster, so it is used there.
func gemmNT(m, n, k int, a, b, c []float32, ldc int) {
	if !useKernel {
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, k, b, k, 1, c, ldc)
		return
	}
	k8 := k &^ 7
	var s [8]float32
	for j := 0; j+4 <= n; j += 4 {
		b0, b1, b2, b3 := b[j*k:(j+1)*k], b[(j+1)*k:(j+2)*k], b[(j+2)*k:(j+3)*k], b[(j+3)*k:(j+4)*k]
		for i := 0; i < m; i += 2 {
			// An odd last row runs as its own pair; the copy is dropped.
			a0 := a[i*k : (i+1)*k]
			a1 := a0
			if i+1 < m {
				a1 = a[(i+1)*k : (i+2)*k]
			}
			if k8 > 0 {
				dot2x4(k8, &a0[0], &a1[0], &b0[0], &b1[0], &b2[0], &b3[0], &s)
			} else {
				s = [8]float32{}
			}
			if k8 < k {
				s[0] += dot(a0[k8:], b0[k8:])
				s[1] += dot(a0[k8:], b1[k8:])
				s[2] += dot(a0[k8:], b2[k8:])
				s[3] += dot(a0[k8:], b3[k8:])
				s[4] += dot(a1[k8:], b0[k8:])
				s[5] += dot(a1[k8:], b1[k8:])
				s[6] += dot(a1[k8:], b2[k8:])
				s[7] += dot(a1[k8:], b3[k8:])
			}
			row := c[i*ldc+j : i*ldc+j+4]
			row[0] += s[0]
			row[1] += s[1]
			row[2] += s[2]
			row[3] += s[3]
			if i+1 < m {
				row = c[(i+1)*ldc+j : (i+1)*ldc+j+4]
				row[0] += s[4]
				row[1] += s[5]
				row[2] += s[6]
				row[3] += s[7]
			}
		}
	}
	// The last n%4 columns, one dot product each.
	for j := n &^ 3; j < n; j++ {
		bj := b[j*k : (j+1)*k]
		for i := range m {
			c[i*ldc+j] += dot(a[i*k:(i+1)*k], bj)
		}
	}
}
