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

	"github.com/bub-bus/bub/internal/checkfor"
)

// Main runs the tests and then waits up to five seconds for every
// goroutine that is not the runtime's or the test framework's to end,
// and for every one of also to return nil; if some do not, it prints
// their stacks (or the errors) and exits non-zero. Call it from
// TestMain. also checks what outlives tests without a goroutine, such as
// connections parked with no goroutine reading them.
func Main(m *testing.M, also ...func() error) {
	code := m.Run()
	if code == 0 {
		if err := checkfor.Wait(5*time.Second, func() error { return checkOnce(also) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func checkOnce(also []func() error) error {
	if leaked := leaked(); len(leaked) > 0 {
		return fmt.Errorf("leakcheck: %d goroutines outlived the tests:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
	for _, f := range also {
		if err := f(); err != nil {
			return fmt.Errorf("leakcheck: %w", err)
		}
	}
	return nil
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
	// The poller of parked connections lives as long as the process;
	// what it holds, Main's also checks (outbound.Parked).
	"outbound.(*poller).run",
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
