// Package buildinfo reports which build of bub is running, from the
// module and VCS data the Go toolchain embeds in every binary.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Name is the software name the bus reports in serverInfo.
const Name = "bub-bus"

var version = sync.OnceValue(func() string {
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
