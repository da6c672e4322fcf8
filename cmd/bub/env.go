package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Environment variables set only what a deployment sets once and every
// invocation shares: where the bus is, the credentials, and the daemons'
// settings (the flags of serve, spawner, telegram, bcp gateway and mcp).
// A flag is bound explicitly where it is defined, with bindEnv or
// bindEnvAs. Per-invocation arguments of one-shot commands (a topic, a
// payload, --all) are flags only: one variable would mean different
// things to different commands, and a destructive command must never
// take its confirmation from an environment the user has forgotten
// about.

// envName is the variable bindEnv gives a flag: --max-message-bytes is
// BUB_MAX_MESSAGE_BYTES.
func envName(flagName string) string {
	return "BUB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagValue wraps every flag's Value, so that parseFlags knows which
// variable, if any, sets the flag and which flag a bad value was for.
type flagValue struct {
	flag.Value
	env    string // the bound environment variable, or ""
	failed bool   // the last Set failed
}

func (v *flagValue) Set(s string) error {
	err := v.Value.Set(s)
	v.failed = err != nil
	return err
}

// IsBoolFlag passes the flag package's test through the wrapper, so that
// --json still needs no value.
func (v *flagValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get passes flag.Getter through, for expectedForm.
func (v *flagValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return v.Value.String()
}

// wrap returns f's flagValue, wrapping its Value on first use.
func wrap(f *flag.Flag) *flagValue {
	if v, ok := f.Value.(*flagValue); ok {
		return v
	}
	v := &flagValue{Value: f.Value}
	f.Value = v
	return v
}

// bindEnv lets the environment variable BUB_<NAME> set flag name, which
// must be defined.
func bindEnv(fs *flag.FlagSet, name string) {
	bindEnvAs(fs, name, envName(name))
}

// bindEnvAs lets the environment variable variable set flag name, for a
// flag whose BUB_<NAME> would not say what it is.
func bindEnvAs(fs *flag.FlagSet, name, variable string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bindEnv: no flag --" + name + " in " + fs.Name())
	}
	wrap(f).env = variable
}

// bindAllEnv binds every flag defined so far: a daemon's flags are all
// settings a deployment makes.
func bindAllEnv(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if wrap(f).env == "" {
			wrap(f).env = envName(f.Name)
		}
	})
}

// envOf returns the variable bound to f, or "".
func envOf(f *flag.Flag) string {
	if v, ok := f.Value.(*flagValue); ok {
		return v.env
	}
	return ""
}

// newFlagSet returns a FlagSet for a subcommand whose usage names the
// environment variable of each bound flag. The usage is printed only for
// --help, which asked for it, so it goes to stdout, where a pipe to grep
// or less finds it. The flag package's own messages are discarded:
// parseFlags prints one line saying what was wrong instead.
func newFlagSet(std stdio, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(std.out, "Usage: bub %s\n\n", synopsis)
		printFlags(std.out, fs)
	}
	return fs
}

// printFlags lists fs's flags with their help, and for each the variable
// bound to it, if any, and its default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var notes []string
		if env := envOf(f); env != "" {
			notes = append(notes, "env "+env)
		}
		if f.DefValue != "" && f.DefValue != "0s" && f.DefValue != "false" {
			notes = append(notes, fmt.Sprintf("default %q", f.DefValue))
		}
		note := ""
		if len(notes) > 0 {
			note = " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(w, "  --%s%s\n      %s\n", f.Name, note, f.Usage)
	})
}

// parseFlags sets fs's flags in layers, each overriding the one before:
// the defaults, the bound environment variables, then the command line.
// A further layer (a configuration file) goes in before the environment.
// It returns false, with the exit status, when parsing failed or help
// was shown; a failure has been reported on io.err in one line.
func parseFlags(fs *flag.FlagSet, io stdio, args []string) (int, bool) {
	fs.VisitAll(func(f *flag.Flag) { wrap(f) })
	if err := applyEnv(fs); err != nil {
		return usageError(io, fs, "%v", err), false
	}
	return parseArgs(fs, io, args)
}

// applyEnv sets every bound flag whose variable is set.
func applyEnv(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envOf(f)
		if name == "" || err != nil {
			return
		}
		if v, ok := os.LookupEnv(name); ok {
			if setErr := fs.Set(f.Name, v); setErr != nil {
				err = fmt.Errorf("environment variable %s=%q (--%s): %s", name, v, f.Name, expectedForm(f, setErr))
			}
		}
	})
	return err
}

// parseArgs parses the command line, printing help for --help and one
// line naming the flag for anything wrong.
func parseArgs(fs *flag.FlagSet, io stdio, args []string) (int, bool) {
	usage := fs.Usage
	fs.Usage = func() {} // printed below, for --help only
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		usage()
		return 0, false
	}
	var bad *flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(*flagValue); ok && v.failed {
			bad = f
		}
	})
	msg := err.Error()
	switch {
	case bad != nil:
		_, value, _ := strings.Cut(msg, "invalid value ")
		value, _, _ = strings.Cut(value, " for flag")
		msg = fmt.Sprintf("--%s %s: %s", bad.Name, value, expectedForm(bad, err))
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		msg = fmt.Sprintf("unknown flag --%s", name)
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-")
		msg = fmt.Sprintf("--%s needs a value", name)
	}
	return usageError(io, fs, "%s", msg), false
}

// usageError prints "bub COMMAND: what was wrong", with where to read
// the flags, and returns exit status 2.
func usageError(io stdio, fs *flag.FlagSet, format string, args ...any) int {
	name, _, _ := strings.Cut(fs.Name(), " [")
	fmt.Fprintf(io.err, "bub %s: %s (see bub %s --help)\n", name, fmt.Sprintf(format, args...), name)
	return 2
}

// expectedForm says what a flag of f's type takes, for a value the flag
// package refused with only "parse error".
func expectedForm(f *flag.Flag, err error) string {
	var v any
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch v.(type) {
	case time.Duration:
		return "want a duration with a unit, such as 5s, 500ms, 2m or 1h30m"
	case bool:
		return "want true or false"
	case int, int64, uint, uint64:
		return "want a whole number, such as 5"
	case float64:
		return "want a number, such as 2.5"
	}
	// A custom Value's own error says more than a guess would.
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.HasPrefix(msg, "invalid value") {
		msg = msg[i+2:]
	}
	return msg
}
