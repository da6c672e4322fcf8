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

func runVersion(_ context.Context, io stdio, _ []string) int {
	fmt.Fprintf(io.out, "%s %s (%s, %s/%s)\n", buildinfo.Name, buildinfo.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
