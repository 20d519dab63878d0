//go:build !(cgo && linux)

package ctrim

// Trim does nothing where glibc's malloc_trim is not reached.
func Trim() bool { return false }
