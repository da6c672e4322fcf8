package bus_test

import (
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: Shutdown must
// end every connection, delivery, scheduler and event goroutine.
func TestMain(m *testing.M) { leakcheck.Main(m) }
