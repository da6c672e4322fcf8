//go:build !unix

package store

import "os"

// lockedByOther cannot tell on this platform; bbolt's own lock still
// refuses a second bus, after the header check has had its say.
func lockedByOther(*os.File) bool { return false }
