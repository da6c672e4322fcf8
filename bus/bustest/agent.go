package bustest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// EchoAgent builds examples/echo-agent on first use and returns its path,
// for tests that start real agent processes (through the spawner). It goes
// beside the test binary, in go test's work directory, which go test
// removes afterwards.
var EchoAgent = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(os.Args[0]), "echo-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/bub-bus/bub/examples/echo-agent").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build echo-agent: %v: %s", err, out)
	}
	return bin, nil
})
