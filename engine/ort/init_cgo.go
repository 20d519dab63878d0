//go:build cgo

package ort

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// env is the process-wide ONNX Runtime environment: the library can be
// loaded once per process, so every Init after a success returns it.
var env struct {
	mu  sync.Mutex
	lib *Library
}

// Init loads the ONNX Runtime shared library and creates the process's
// environment. It is safe for concurrent use and idempotent: after a
// success, later calls return the same [Library] (an explicit, different
// Path is then an error). A failed Init may be retried.
func Init(opts LibraryOptions) (Library, error) {
	env.mu.Lock()
	defer env.mu.Unlock()
	paths, explicit := opts.candidates()
	if env.lib != nil {
		if explicit && paths[0] != env.lib.Path {
			if _, err := os.Stat(paths[0]); errors.Is(err, fs.ErrNotExist) {
				return Library{}, notFound([]string{paths[0] + " (no such file)"})
			}
			return *env.lib, fmt.Errorf("onnx runtime already loaded from %s, cannot load %s", env.lib.Path, paths[0])
		}
		return *env.lib, nil
	}
	var tried []string
	for _, p := range paths {
		if explicit || p != systemLibrary() {
			// A missing file gets a short reason instead of dlopen's.
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				tried = append(tried, p+" (no such file)")
				continue
			}
		}
		ort.SetSharedLibraryPath(p)
		if err := telemetryOff(); err != nil {
			return Library{}, err
		}
		if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		lib := Library{Path: p, Version: ort.GetVersion()}
		if err := checkVersion(lib.Version); err != nil {
			_ = ort.DestroyEnvironment()
			return Library{}, fmt.Errorf("%s: %w", p, err)
		}
		// Belt and braces: the C API's switch, for builds that send
		// events through the environment.
		if err := ort.DisableTelemetry(); err != nil {
			_ = ort.DestroyEnvironment()
			return Library{}, fmt.Errorf("%s: %w", p, err)
		}
		env.lib = &lib
		return lib, nil
	}
	return Library{}, notFound(tried)
}

// telemetryOff sets [EnvTelemetryOff] in the process environment before
// the library creates its environment, whatever it held: the Linux builds
// of ONNX Runtime 1.30 start their telemetry when the environment is
// created (a device id and an event database under
// $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime, an empty
// /tmp/mat-debug-<pid>.log, uploads to a Microsoft collector), before the
// C API's DisableTelemetryEvents can be called; only this variable stops
// it. With cgo, os.Setenv also sets the C environment the library reads.
// Child processes inherit it.
func telemetryOff() error {
	if err := os.Setenv(EnvTelemetryOff, "1"); err != nil {
		return fmt.Errorf("onnx runtime: cannot turn telemetry off: %w", err)
	}
	return nil
}
