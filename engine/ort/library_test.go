package ort

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCandidatesExplicit(t *testing.T) {
	t.Setenv(EnvLibrary, "/from/env.so")
	got, explicit := LibraryOptions{Path: "/given.so"}.candidates()
	if !explicit || !slices.Equal(got, []string{"/given.so"}) {
		t.Errorf("path: %v %v", got, explicit)
	}
	got, explicit = LibraryOptions{}.candidates()
	if !explicit || !slices.Equal(got, []string{"/from/env.so"}) {
		t.Errorf("env: %v %v", got, explicit)
	}
}

// TestCandidatesSearch finds the make-deps library in a parent of the
// working directory, and ends with the loader's own search.
func TestCandidatesSearch(t *testing.T) {
	t.Setenv(EnvLibrary, "")
	root := t.TempDir()
	lib := filepath.Join(root, depsLibrary)
	must(t, os.MkdirAll(filepath.Dir(lib), 0o755))
	must(t, os.WriteFile(lib, nil, 0o644))
	deep := filepath.Join(root, "a", "b")
	must(t, os.MkdirAll(deep, 0o755))
	t.Chdir(deep)
	got, explicit := LibraryOptions{}.candidates()
	if explicit {
		t.Error("search reported as explicit")
	}
	if !slices.Contains(got, lib) {
		t.Errorf("candidates %v lack %s", got, lib)
	}
	if got[len(got)-1] != systemLibrary() {
		t.Errorf("last candidate %q, want the loader name", got[len(got)-1])
	}
}

func TestNotFoundMessage(t *testing.T) {
	err := notFound([]string{"/x.so (no such file)", "libonnxruntime.so.1 (dlopen failed)"})
	msg := err.Error()
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("not ErrLibraryNotFound: %v", err)
	}
	for _, want := range []string{"onnx runtime library not found: tried /x.so", "make deps", "JETEMBED_ORT_LIB"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"1.30.0": true, "1.24.1": true, "2.0.0": true, "1.24": true,
		"1.23.2": false, "1.9.0": false, "0.99.0": false, "dev": false, "": false,
	} {
		err := checkVersion(v)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrVersion)) {
			t.Errorf("checkVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
