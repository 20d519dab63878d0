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
