package spawner

import "syscall"

// setParentDeathSignal has Linux kill the agent when the spawner dies
// without stopping it (SIGKILL, a crash), so agents never outlive their
// spawner and keep reconnecting to the bus as orphans. Linux sends the
// signal when the thread that started the agent exits; Go keeps its
// threads for the life of the process unless a goroutine locked to one
// ends, which the spawner never does.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
