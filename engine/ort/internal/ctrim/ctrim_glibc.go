//go:build cgo && linux

// Package ctrim returns the C heap's free memory to the operating system
// (glibc's malloc_trim). It is engine/ort's one cgo file of its own: ONNX
// Runtime allocates its tensors with the C allocator, and what a long run
// freed stays in the process until trimmed when glibc is told to keep it
// (see the malloc tunables in the README). On another C library (musl)
// it does nothing.
package ctrim

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static int jetembed_malloc_trim(void) { return malloc_trim(0); }
#else
static int jetembed_malloc_trim(void) { return 0; }
#endif
*/
import "C"

// Trim gives the free memory of every malloc arena back to the kernel and
// reports whether any was released.
func Trim() bool { return C.jetembed_malloc_trim() == 1 }
