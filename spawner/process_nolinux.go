//go:build unix && !linux

package spawner

import "syscall"

// setParentDeathSignal does nothing where the kernel offers no parent
// death signal: agents of a spawner that was killed must be stopped by
// hand there.
func setParentDeathSignal(*syscall.SysProcAttr) {}
