package peer_test

import (
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: every Conn,
// handler and reconnect loop must end with Close or the bus.
func TestMain(m *testing.M) { leakcheck.Main(m) }
