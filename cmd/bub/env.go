package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// envName is the environment variable that sets a flag: --max-message-bytes
// is BUB_MAX_MESSAGE_BYTES.
func envName(flagName string) string {
	return "BUB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet returns a FlagSet for a subcommand whose usage names every
// flag's environment variable.
func newFlagSet(io stdio, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintf(io.err, "Usage: bub %s\n\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(io.err, "  --%s (env %s, default %q)\n      %s\n", f.Name, envName(f.Name), f.DefValue, f.Usage)
		})
	}
	return fs
}

// parseFlags applies BUB_* environment variables, then the command line,
// so a flag given on the command line wins over the environment.
// It returns a non-zero exit status when parsing failed or help was shown.
func parseFlags(fs *flag.FlagSet, io stdio, args []string) (int, bool) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("environment variable %s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return errorf(io, "%v", envErr), false
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
