//go:build !unix

package spawner

import (
	"os"
	"os/exec"
	"syscall"
)

// configureProcess does nothing where there are no process groups.
func configureProcess(*exec.Cmd) {}

// signalAgent kills the agent: without Unix signals there is no polite
// way to ask it to stop.
func signalAgent(p *os.Process, _ syscall.Signal) error {
	return p.Kill()
}
