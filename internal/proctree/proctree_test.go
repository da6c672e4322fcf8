package proctree_test

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/bub-bus/bub/internal/proctree"
)

// TestChildren counts this test's own children as they come and go.
func TestChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	self := os.Getpid()
	before := proctree.Children(self)
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if got := proctree.Children(self); got != before+2 {
		t.Errorf("with two children started: %d, want %d", got, before+2)
	}
	for _, cmd := range cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	if got := proctree.Children(self); got != before {
		t.Errorf("with both reaped: %d, want %d", got, before)
	}
	if got := proctree.Children(-1); got != 0 {
		t.Errorf("children of no process: %d", got)
	}
}
