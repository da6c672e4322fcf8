package bus_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSingleNodeLinksNoNATS: an embedder of the bus that does not use a
// cluster does not link NATS; only package cluster does.
func TestSingleNodeLinksNoNATS(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the bus's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/bub-bus/bub/bus").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for dep := range strings.Lines(string(out)) {
		if strings.Contains(dep, "nats-io") || strings.TrimSpace(dep) == "github.com/bub-bus/bub/cluster" {
			t.Errorf("package bus depends on %s", strings.TrimSpace(dep))
		}
	}
}
