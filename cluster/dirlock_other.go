//go:build !unix

package cluster

import "os"

// lockFile takes no lock: only Unix systems have flock, so elsewhere a
// second node on the same directory is not refused.
func lockFile(*os.File) error { return nil }
