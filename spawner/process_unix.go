//go:build unix

package spawner

import (
	"os"
	"os/exec"
	"syscall"
)

// configureProcess puts the agent in a process group of its own, so that
// stopping it also stops whatever it started (a shell script's children,
// a language server), and so that a Ctrl-C meant for the spawner's
// terminal reaches the spawner, which then stops its agents in order.
func configureProcess(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	setParentDeathSignal(cmd.SysProcAttr)
}

// signalAgent sends sig to the agent's process group, or to the process
// alone if the group is gone.
func signalAgent(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err == nil {
		return nil
	}
	return p.Signal(sig)
}
