package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/bub-bus/bub/internal/buildinfo"
)

func init() {
	register("version", "print the version of this bub", runVersion)
}

func runVersion(_ context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "version", "version\n\nPrints the version of this bub, the Go version it was built with, and its platform.")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(io, fs, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(io.out, "%s %s (%s, %s/%s)\n", buildinfo.Name, buildinfo.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
