package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// flagSet wraps a [flag.FlagSet] so that every flag can also be set by a
// JETEMBED_* environment variable. The order of precedence is: command-line
// flag, environment variable, default. Every binding is recorded so that
// `--print-config` and the check of docs/configuration.md can list them.
type flagSet struct {
	*flag.FlagSet
	bindings []binding
	envErrs  []error
}

// binding is one flag and the environment variable that backs it.
type binding struct {
	Flag, Env, Usage string
}

func newFlagSet(name string, io stdio) *flagSet {
	fs := flag.NewFlagSet("jetembed "+name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	return &flagSet{FlagSet: fs}
}

// envName is the environment variable for a flag: JETEMBED_ + upper snake case.
func envName(flagName string) string {
	return "JETEMBED_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (fs *flagSet) bind(name, usage string) string {
	env := envName(name)
	fs.bindings = append(fs.bindings, binding{Flag: name, Env: env, Usage: usage})
	return fmt.Sprintf("%s (env %s)", usage, env)
}

// String defines a string flag backed by its environment variable. The
// variable's value is not the flag's default, so that --help never prints
// it (it may be a password).
func (fs *flagSet) String(name, def, usage string) *string {
	p := new(string)
	fs.StringVar(p, name, def, usage)
	return p
}

// StringVar is [flagSet.String] into p.
func (fs *flagSet) StringVar(p *string, name, def, usage string) {
	fs.FlagSet.StringVar(p, name, def, fs.bind(name, usage))
	fs.fromEnv(name)
}

// Int defines an int flag backed by its environment variable.
func (fs *flagSet) Int(name string, def int, usage string) *int {
	p := new(int)
	fs.IntVar(p, name, def, usage)
	return p
}

// IntVar is [flagSet.Int] into p.
func (fs *flagSet) IntVar(p *int, name string, def int, usage string) {
	envVar(fs, p, name, def, usage, strconv.Atoi, false)
}

// Bool defines a bool flag backed by its environment variable.
func (fs *flagSet) Bool(name string, def bool, usage string) *bool {
	p := new(bool)
	fs.BoolVar(p, name, def, usage)
	return p
}

// BoolVar is [flagSet.Bool] into p.
func (fs *flagSet) BoolVar(p *bool, name string, def bool, usage string) {
	envVar(fs, p, name, def, usage, strconv.ParseBool, true)
}

// Duration defines a duration flag backed by its environment variable.
func (fs *flagSet) Duration(name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	fs.DurationVar(p, name, def, usage)
	return p
}

// DurationVar is [flagSet.Duration] into p.
func (fs *flagSet) DurationVar(p *time.Duration, name string, def time.Duration, usage string) {
	envVar(fs, p, name, def, usage, time.ParseDuration, false)
}

// AutoBoolVar defines a flag into p that is "auto", "true" or "false" (a
// bare --name means true), backed by its environment variable.
func (fs *flagSet) AutoBoolVar(p *string, name, def, usage string) {
	parse := func(s string) (string, error) {
		switch strings.ToLower(s) {
		case "auto":
			return "auto", nil
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return "", fmt.Errorf("%q is not auto, true or false", s)
		}
		return strconv.FormatBool(b), nil
	}
	envVar(fs, p, name, def, usage, parse, true)
}

// envVar defines a flag of type T into p, backed by its environment
// variable.
func envVar[T any](fs *flagSet, p *T, name string, def T, usage string, parse func(string) (T, error), isBool bool) {
	*p = def
	fs.Var(&envValue[T]{p: p, parse: parse, isBool: isBool}, name, fs.bind(name, usage))
	fs.fromEnv(name)
}

// envErr records a malformed environment variable; Parse reports it.
func (fs *flagSet) fromEnv(name string) {
	env := envName(name)
	if v, ok := os.LookupEnv(env); ok {
		if err := fs.FlagSet.Lookup(name).Value.Set(v); err != nil {
			fs.envErrs = append(fs.envErrs, fmt.Errorf("%w: %s=%q: %v", errUsage, env, v, err))
		}
	}
}

// Parse parses args and reports the first malformed environment variable.
func (fs *flagSet) Parse(args []string) error {
	if err := fs.FlagSet.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if len(fs.envErrs) > 0 {
		return fs.envErrs[0]
	}
	return nil
}

type envValue[T any] struct {
	p      *T
	parse  func(string) (T, error)
	isBool bool
}

func (v *envValue[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return fmt.Sprint(*v.p)
}

func (v *envValue[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *envValue[T]) IsBoolFlag() bool { return v.isBool }
