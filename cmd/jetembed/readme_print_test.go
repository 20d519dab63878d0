package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// printedConfig parses --print-config output: "--flag=value\tENV" lines.
func printedConfig(t *testing.T, out string) map[string][2]string {
	t.Helper()
	got := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		kv, env, ok := strings.Cut(line, "\t")
		name, value, ok2 := strings.Cut(strings.TrimPrefix(kv, "--"), "=")
		if !ok || !ok2 || !strings.HasPrefix(kv, "--") {
			t.Fatalf("print-config line %q is not --flag=value<TAB>ENV", line)
		}
		if _, dup := got[name]; dup {
			t.Errorf("print-config prints --%s twice", name)
		}
		got[name] = [2]string{value, env}
	}
	return got
}

// envValueFor returns a value for f's variable that differs from its
// default, and how print-config should show it.
func envValueFor(t *testing.T, f usageFlag) (set, shown string) {
	t.Helper()
	if f.Type == "" && f.Default == "auto" { // an auto|true|false flag
		return "true", "true"
	}
	if f.Type == "" {
		b, err := strconv.ParseBool(f.Default)
		if err != nil {
			t.Fatalf("--%s: bool default %q: %v", f.Name, f.Default, err)
		}
		return strconv.FormatBool(!b), strconv.FormatBool(!b)
	}
	if f.Type == "string" {
		return "v-" + f.Name, "v-" + f.Name
	}
	if n, err := strconv.Atoi(f.Default); err == nil {
		return strconv.Itoa(n + 7), strconv.Itoa(n + 7)
	}
	if d, err := time.ParseDuration(f.Default); err == nil {
		return (d + 7*time.Second).String(), (d + 7*time.Second).String()
	}
	if x, err := strconv.ParseFloat(f.Default, 64); err == nil {
		return fmt.Sprint(x + 0.5), fmt.Sprint(x + 0.5)
	}
	t.Fatalf("--%s: cannot make a value of type %q from default %q", f.Name, f.Type, f.Default)
	return "", ""
}

// TestPrintConfigEveryFlag checks that serve and dev --print-config print
// every flag that has a variable, once, with its variable and its effective
// value: the default when nothing is set, and for serve the variable's
// value when every variable is set.
func TestPrintConfigEveryFlag(t *testing.T) {
	clearEnv(t)
	all := commandFlags(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"serve", "dev"} {
		code, out, errOut := runCmd(t, ctx, name, "--print-config")
		if code != 0 {
			t.Fatalf("%s --print-config: exit %d: %s", name, code, errOut)
		}
		got := printedConfig(t, out)
		n := 0
		for _, f := range all[name] {
			if f.Env == "" {
				continue
			}
			n++
			want := [2]string{f.Default, f.Env}
			if f.Name == "print-config" {
				want[0] = "true"
			}
			if g, ok := got[f.Name]; !ok {
				t.Errorf("%s --print-config lacks --%s", name, f.Name)
			} else if g != want {
				t.Errorf("%s --print-config: --%s=%s %s, want %s %s", name, f.Name, g[0], g[1], want[0], want[1])
			}
		}
		if len(got) != n {
			t.Errorf("%s --print-config prints %d flags, -h lists %d with a variable", name, len(got), n)
		}
	}

	// Every variable set at once: print-config shows what serve would run
	// with, secrets masked. (dev validates the stream settings before it
	// prints, so made-up names would be refused there.)
	want := map[string]string{}
	for _, f := range all["serve"] {
		if f.Env == "" {
			continue
		}
		set, shown := envValueFor(t, f)
		t.Setenv(f.Env, set)
		if secretFlag(f.Name) {
			shown = "<set>"
		}
		want[f.Name] = shown
	}
	code, out, errOut := runCmd(t, ctx, "serve")
	if code != 0 {
		t.Fatalf("serve with JETEMBED_PRINT_CONFIG=true: exit %d: %s", code, errOut)
	}
	got := printedConfig(t, out)
	for name, w := range want {
		if got[name][0] != w {
			t.Errorf("serve --print-config with every variable set: --%s=%s, want %s", name, got[name][0], w)
		}
	}
	for _, f := range all["serve"] {
		if secretFlag(f.Name) && strings.Contains(out, "v-"+f.Name) {
			t.Errorf("print-config shows the value of --%s", f.Name)
		}
	}
}
