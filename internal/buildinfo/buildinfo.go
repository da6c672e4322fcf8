// Package buildinfo reports which build of bub is running, from the
// module and VCS data the Go toolchain embeds in every binary.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Name is the software name the bus reports in serverInfo.
const Name = "bub-bus"

// stamped is set at link time by release builds (make image):
//
//	-ldflags "-X github.com/bub-bus/bub/internal/buildinfo.stamped=v1.2.3"
//
// It wins over what the toolchain recorded, because those builds run
// with -trimpath and, here, GOFLAGS=-buildvcs=false, so the toolchain
// records no revision; and a binary copied into an image has no work
// tree to ask.
var stamped string

var version = sync.OnceValue(func() string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
})

// Version returns the module version, "dev" for a build from a work tree,
// with the VCS revision appended when the toolchain recorded one.
func Version() string { return version() }
