package mallocenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestChildEnv: a process this one starts gets the environment without the
// tunables Reexec added, and with them untouched when the operator set
// GLIBC_TUNABLES (no TunedEnv).
func TestChildEnv(t *testing.T) {
	t.Setenv("GLIBC_TUNABLES", Tunables)
	t.Setenv(TunedEnv, "1")
	t.Setenv("KEEP_ME", "x")
	env := ChildEnv()
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GLIBC_TUNABLES=") }) {
		t.Errorf("child environment keeps GLIBC_TUNABLES: %v", env)
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, TunedEnv+"=") }) {
		t.Errorf("child environment keeps %s: a jetembed it starts would not tune itself", TunedEnv)
	}
	if !slices.Contains(env, "KEEP_ME=x") {
		t.Error("child environment lost the other variables")
	}
	t.Setenv(TunedEnv, "")
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
	if !slices.Contains(ChildEnv(), "GLIBC_TUNABLES=glibc.malloc.arena_max=2") {
		t.Error("the operator's own GLIBC_TUNABLES was dropped")
	}
}

// TestMain: with MALLOCENV_PROBE set, the test binary is a probe: it calls
// Reexec and prints the GLIBC_TUNABLES it then runs with.
func TestMain(m *testing.M) {
	if os.Getenv("MALLOCENV_PROBE") != "" {
		Reexec()
		fmt.Print(os.Getenv("GLIBC_TUNABLES"))
		fmt.Fprint(os.Stderr, Mode())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestReexec runs the probe: a process re-executes itself with the
// tunables, once; JETEMBED_MALLOC=system and an operator's own
// GLIBC_TUNABLES keep it as it is.
func TestReexec(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("glibc tunables are Linux's")
	}
	probe := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, TunedEnv+"=") || strings.HasPrefix(kv, "JETEMBED_MALLOC=")
		}), append(env, "MALLOCENV_PROBE=1")...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probe %v: %v", env, err)
		}
		return string(out)
	}
	if got := probe(); got != Tunables {
		t.Errorf("re-executed with GLIBC_TUNABLES=%q, want %q", got, Tunables)
	}
	if got := probe("JETEMBED_MALLOC=system"); got != "" {
		t.Errorf("JETEMBED_MALLOC=system: GLIBC_TUNABLES=%q, want none", got)
	}
	if got := probe("GLIBC_TUNABLES=glibc.malloc.arena_max=4"); got != "glibc.malloc.arena_max=4" {
		t.Errorf("operator's GLIBC_TUNABLES became %q", got)
	}
	if got := probe("GLIBC_TUNABLES="); got != "" {
		t.Errorf("an empty GLIBC_TUNABLES became %q; an operator's setting, even empty, stands", got)
	}
}

func TestMode(t *testing.T) {
	t.Setenv(TunedEnv, "1")
	t.Setenv("GLIBC_TUNABLES", Tunables)
	if m := Mode(); m != "tuned" {
		t.Errorf("re-executed: mode %q, want tuned", m)
	}
	t.Setenv(TunedEnv, "")
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")
	if m := Mode(); m != "operator" {
		t.Errorf("operator's tunables: mode %q, want operator", m)
	}
	os.Unsetenv("GLIBC_TUNABLES")
	if m := Mode(); m != "system" {
		t.Errorf("no tunables: mode %q, want system", m)
	}
}
