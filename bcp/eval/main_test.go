package eval

import (
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: Run must
// close every peer, the gateway and the bus it started.
func TestMain(m *testing.M) { leakcheck.Main(m) }
