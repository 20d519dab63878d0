//go:build cgo && linux

// Package ctrim returns the C heap's free memory to the operating system
// (glibc's malloc_trim). It is engine/ort's one cgo file of its own: ONNX
// Runtime allocates its tensors with the C allocator, and what a long run
// freed stays in the process until trimmed when glibc is told to keep it
// (see "The C allocator" in docs/architecture.md). On another C library (musl)
// it does nothing. It also asks the C library for the L2 cache size the
// way ONNX Runtime does, since ORT's CPU flash attention runs only when
// that size is above 0.
package ctrim

/*
#include <stdlib.h>
#include <unistd.h>
static long jetembed_l2_cache_size(void) {
#ifdef _SC_LEVEL2_CACHE_SIZE
	return sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
	return 0;
#endif
}
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

// L2CacheSize is sysconf(_SC_LEVEL2_CACHE_SIZE), what ONNX Runtime's
// posix environment reports as the L2 size: 0 or less where the C library
// or the machine does not say (some VMs, glibc on arm64). known is true:
// this is the value ORT sees on Linux.
func L2CacheSize() (size int64, known bool) { return int64(C.jetembed_l2_cache_size()), true }
