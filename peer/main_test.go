package peer_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when goroutines outlive the tests: every Conn,
// handler and reconnect loop must end with Close or the bus.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := checkGoroutines(5 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkGoroutines waits up to timeout for goroutines that are not the
// runtime's or the test framework's to end.
func checkGoroutines(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaked := leakedGoroutines()
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benignGoroutines are stack fragments of goroutines that outlive tests
// by design.
var benignGoroutines = []string{
	"testing.(*M).",
	"testing.runTests",
	"testing.tRunner",
	"leakedGoroutines",
	"os/signal.signal_recv",
	"runtime.ensureSigM",
	"created by runtime.gc",
	"runtime.goexit0",
	"runtime/trace.Start",
	"testing.(*T).Run",
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
next:
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, benign := range benignGoroutines {
			if strings.Contains(g, benign) {
				continue next
			}
		}
		if strings.TrimSpace(g) != "" {
			leaked = append(leaked, g)
		}
	}
	return leaked
}
