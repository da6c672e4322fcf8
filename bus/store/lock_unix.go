//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// lockedByOther reports whether another open of the file holds bbolt's
// exclusive lock on it. The header check reads the file before bbolt
// locks it, so a file that a running bus is writing can look torn; this
// tells that case apart from damage.
func lockedByOther(f *os.File) bool {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}
