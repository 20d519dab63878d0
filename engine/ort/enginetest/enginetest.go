// Package enginetest opens the bundled tiny model on ONNX Runtime (CPU)
// for the tests of the packages that run a real engine.
package enginetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

// ModelDir is the directory of a committed test model ("tiny-hidden",
// "tiny-heads").
func ModelDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "models", name)
}

// Open opens the tiny-hidden model with cfg, one intra-op thread a
// session (no warm-up grid unless cfg has one), and closes it at cleanup.
// It skips the test when JETEMBED_ORT_LIB is unset or cgo is off.
func Open(tb testing.TB, cfg engine.Config) *engine.Engine {
	tb.Helper()
	return OpenWith(tb, cfg, nil)
}

// OpenWith is [Open] with every session's runner passed through wrap (nil:
// none), for tests that control when runs finish.
func OpenWith(tb testing.TB, cfg engine.Config, wrap func(engine.Runner) engine.Runner) *engine.Engine {
	tb.Helper()
	lib := os.Getenv("JETEMBED_ORT_LIB")
	if lib == "" {
		tb.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	if _, err := ort.Init(ort.LibraryOptions{Path: lib}); errors.Is(err, ort.ErrNoCgo) {
		tb.Skip(err)
	} else if err != nil {
		tb.Fatal(err)
	}
	m, err := model.Open(ModelDir("tiny-hidden"), model.DefaultOptions())
	if err != nil {
		tb.Fatal(err)
	}
	tk, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		tb.Fatal(err)
	}
	if cfg.Warmup == nil {
		cfg.NoWarmup = true
	}
	e, err := engine.New(context.Background(), cfg, engine.TokenizerFunc(tk.EncodeIDs), m, func(int) (engine.Runner, error) {
		r, err := ort.Open(m, ort.Provider{IntraOpThreads: 1})
		if err != nil || wrap == nil {
			return r, err
		}
		return wrap(r), nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}
