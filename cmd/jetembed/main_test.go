package main

import (
	"context"
	"strings"
	"testing"
)

// TestHelpAndVersion: `jetembed help CMD` prints that command's flags (not
// the global usage) and `--version` is the version command.
func TestHelpAndVersion(t *testing.T) {
	ctx := context.Background()
	code, out, errOut := runCmd(t, ctx, "help", "serve")
	if code != 0 || !strings.Contains(out+errOut, "-reply-allow") || strings.Contains(out+errOut, "Commands:") {
		t.Errorf("help serve: exit %d, output:\n%s%s", code, out, errOut)
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		if code, out, _ := runCmd(t, ctx, arg); code != 0 || strings.TrimSpace(out) != version {
			t.Errorf("%s: exit %d, %q, want %q", arg, code, out, version)
		}
	}
	if code, _, errOut := runCmd(t, ctx, "help", "nope"); code != 2 || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, %s", code, errOut)
	}
}

func TestCPUProvider(t *testing.T) {
	t.Setenv("JETEMBED_PROVIDER", "")
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--model", "m"}, true},
		{[]string{"--provider", "cpu"}, true},
		{[]string{"--provider=cuda"}, false},
		{[]string{"-provider", "tensorrt", "--model", "m"}, false},
		{[]string{"--model", "provider"}, true},
		{[]string{"--", "--provider", "cuda"}, true},
	} {
		if got := cpuProvider(tc.args); got != tc.want {
			t.Errorf("cpuProvider(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
	t.Setenv("JETEMBED_PROVIDER", "cuda")
	if cpuProvider(nil) {
		t.Error("JETEMBED_PROVIDER=cuda counted as CPU")
	}
	if !cpuProvider([]string{"--provider", "cpu"}) {
		t.Error("--provider cpu over JETEMBED_PROVIDER=cuda counted as GPU")
	}
}
