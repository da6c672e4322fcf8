// Package leakcheck fails a test binary whose goroutines outlive its
// tests: every connection, handler and background loop the packages start
// must end when what owns it is closed.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests and then waits up to five seconds for every
// goroutine that is not the runtime's or the test framework's to end;
// if some do not, it prints their stacks and exits non-zero. Call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := check(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func check(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaked := leaked()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutines outlived the tests:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benign are stack fragments of goroutines that outlive tests by design.
var benign = []string{
	"testing.(*M).",
	"testing.runTests",
	"testing.tRunner",
	"leakcheck.leaked",
	"os/signal.signal_recv",
	"runtime.ensureSigM",
	"created by runtime.gc",
	"runtime.goexit0",
	"runtime/trace.Start",
	"testing.(*T).Run",
}

func leaked() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
next:
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, b := range benign {
			if strings.Contains(g, b) {
				continue next
			}
		}
		if strings.TrimSpace(g) != "" {
			out = append(out, g)
		}
	}
	return out
}
