//go:build !(cgo && linux)

package ctrim

// Trim does nothing where glibc's malloc_trim is not reached.
func Trim() bool { return false }

// L2CacheSize is unknown where the C library is not reached (ONNX Runtime
// asks sysctl on macOS, for one).
func L2CacheSize() (size int64, known bool) { return 0, false }
