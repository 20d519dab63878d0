package ort

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// EnvLibrary names the environment variable that points at the ONNX Runtime
// shared library (the Makefile exports it for tests).
const EnvLibrary = "JETEMBED_ORT_LIB"

// EnvTelemetryOff is the variable ONNX Runtime reads to keep its
// telemetry off; [Init] sets it to 1 in every process that loads the
// library.
const EnvTelemetryOff = "ORT_DISABLE_TELEMETRY"

// depsLibrary is where `make deps` puts the library, relative to the
// repository root.
var depsLibrary = filepath.Join(".deps", "onnxruntime", systemLibrary())

// minVersion is the oldest ONNX Runtime onnxruntime_go v1.27 can drive: it
// asks for C API version 24 (ORT 1.24).
var minVersion = [2]int{1, 24}

// LibraryOptions say where the ONNX Runtime shared library is.
type LibraryOptions struct {
	// Path is the library file. Empty means $JETEMBED_ORT_LIB, then the
	// `make deps` location beside the executable or the working directory
	// (or one of their parents), then the system loader's search.
	Path string
}

// Library describes the loaded ONNX Runtime.
type Library struct {
	Path    string // as given to the loader
	Version string // as reported by the library, e.g. "1.30.0"
}

func systemLibrary() string {
	if runtime.GOOS == "darwin" {
		return "libonnxruntime.dylib"
	}
	return "libonnxruntime.so.1"
}

// candidates lists the library paths to try, in order, and whether the
// list is an explicit choice that must not fall back to a search.
func (o LibraryOptions) candidates() (paths []string, explicit bool) {
	if o.Path != "" {
		return []string{o.Path}, true
	}
	if p := os.Getenv(EnvLibrary); p != "" {
		return []string{p}, true
	}
	var roots []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		roots = append(roots, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
	}
	seen := map[string]bool{}
	for _, root := range roots {
		for dir := root; ; dir = filepath.Dir(dir) {
			p := filepath.Join(dir, depsLibrary)
			if !seen[p] {
				seen[p] = true
				if _, err := os.Stat(p); err == nil {
					paths = append(paths, p)
				}
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	// The bare name lets the dynamic loader search LD_LIBRARY_PATH and the
	// system directories.
	return append(paths, systemLibrary()), false
}

// notFound is the start-up error when no candidate loads; tried holds
// "path (reason)" entries.
func notFound(tried []string) error {
	return fmt.Errorf("%w: tried %s; run `make deps` or set %s",
		ErrLibraryNotFound, strings.Join(tried, ", "), EnvLibrary)
}

// checkVersion parses "major.minor[.patch...]" and rejects versions older
// than minVersion.
func checkVersion(v string) error {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("%w: cannot parse version %q", ErrVersion, v)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: cannot parse version %q", ErrVersion, v)
	}
	if major < minVersion[0] || major == minVersion[0] && minor < minVersion[1] {
		return fmt.Errorf("%w: found %s, need %d.%d or newer", ErrVersion, v, minVersion[0], minVersion[1])
	}
	return nil
}
