package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
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
	name     string
	out      io.Writer
	bindings []binding
	envErrs  []error
	// common, when set, are the flags -h lists; --help-all lists every
	// flag. Without it -h lists every flag.
	common map[string]bool
	// removed are flags that no longer exist, with what to do instead:
	// given as a flag or a variable they are refused with that message.
	removed map[string]string
}

// binding is one flag and the environment variable that backs it.
type binding struct {
	Flag, Env, Usage string
}

func newFlagSet(name string, io stdio) *flagSet {
	fs := flag.NewFlagSet("jetembed "+name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = nil // [flagSet.printHelp], unless the command sets its own
	return &flagSet{FlagSet: fs, name: name, out: io.err}
}

// addCommon adds to the flags -h lists (the others are under
// --help-all); names the command does not define are skipped.
func (fs *flagSet) addCommon(names ...string) {
	if fs.common == nil {
		fs.common = map[string]bool{}
	}
	for _, n := range names {
		if fs.Lookup(n) != nil {
			fs.common[n] = true
		}
	}
}

// isSet reports whether the flag was given, on the command line or in its
// variable (even empty).
func (fs *flagSet) isSet(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	_, env := os.LookupEnv(envName(name))
	return set || env
}

// remove records a flag that no longer exists and what to do instead.
func (fs *flagSet) remove(name, instead string) {
	if fs.removed == nil {
		fs.removed = map[string]string{}
	}
	fs.removed[name] = instead
}

// printHelp writes the usage line and the flags: the common ones, or
// every flag when all is set or the command has no common set.
func (fs *flagSet) printHelp(all bool) {
	fmt.Fprintf(fs.out, "Usage: %s\n\n", commandUsage(fs.name))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if all || fs.common == nil {
		fmt.Fprintf(fs.out, "Flags (each also an environment variable, JETEMBED_<FLAG>; see docs/configuration.md):\n")
		fs.PrintDefaults()
		return
	}
	fmt.Fprintf(fs.out, "Common flags (%d of %d: 'jetembed %s --help-all' lists every one; each is also an environment variable, JETEMBED_<FLAG>; see docs/configuration.md):\n", len(fs.common), n, fs.name)
	some := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	some.SetOutput(fs.out)
	fs.VisitAll(func(f *flag.Flag) {
		if fs.common[f.Name] {
			some.Var(f.Value, f.Name, f.Usage)
			some.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	some.PrintDefaults()
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
// -h and --help print the help (the common flags, when the command has a
// set of them), --help-all every flag; both return [flag.ErrHelp]. A bad
// flag is an errUsage naming it, and nothing else is printed: main adds
// the usage line and where to look.
func (fs *flagSet) Parse(args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--help-all" || a == "-help-all" {
			fs.printHelp(true)
			return flag.ErrHelp
		}
	}
	usage := fs.FlagSet.Usage
	fs.FlagSet.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.FlagSet.Parse(args)
	fs.FlagSet.Usage = usage
	fs.SetOutput(fs.out)
	if err == flag.ErrHelp {
		if usage != nil {
			usage()
		} else {
			fs.printHelp(false)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %s", errUsage, fs.flagError(err))
	}
	for _, name := range slices.Sorted(maps.Keys(fs.removed)) {
		if v, ok := os.LookupEnv(envName(name)); ok {
			return fmt.Errorf("%w: %s=%q: --%s was removed: %s", errUsage, envName(name), v, name, fs.removed[name])
		}
	}
	if len(fs.envErrs) > 0 {
		return fs.envErrs[0]
	}
	return nil
}

// flagError rewrites the flag package's messages the way the CLIs our
// users know write them: the flag named with its two dashes first.
func (fs *flagSet) flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if instead, ok := fs.removed[name]; ok {
			return fmt.Sprintf("--%s was removed: %s", name, instead)
		}
		return fmt.Sprintf("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("flag --%s needs a value", name)
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "x" for flag -name: cause
		if v, after, ok := strings.Cut(rest, " for flag -"); ok {
			return fmt.Sprintf("invalid value %s for flag --%s", v, after)
		}
	}
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if v, after, ok := strings.Cut(rest, " for -"); ok {
			return fmt.Sprintf("invalid value %s for flag --%s", v, after)
		}
	}
	return msg
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
	var num *strconv.NumError
	switch {
	case errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange):
		return errors.New("out of range")
	case errors.As(err, &num) && num.Func == "ParseBool":
		return errors.New("want true or false")
	case errors.As(err, &num):
		return errors.New("not a whole number")
	case err != nil && strings.HasPrefix(err.Error(), "time: "):
		return errors.New("not a duration (e.g. 500ms, 30s, 5m)")
	case err != nil:
		return err
	}
	*v.p = x
	return nil
}

func (v *envValue[T]) IsBoolFlag() bool { return v.isBool }
