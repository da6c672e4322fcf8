package bus_test

import (
	"fmt"
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
	"github.com/bub-bus/bub/internal/outbound"
)

// TestMain fails the run when goroutines outlive the tests: Shutdown must
// end every connection, delivery, scheduler and event goroutine; and
// when a connection is still parked, which has no goroutine to show.
func TestMain(m *testing.M) { leakcheck.Main(m, noneParked) }

// noneParked fails while a connection of the process is parked.
func noneParked() error {
	if n := outbound.Parked(); n > 0 {
		return fmt.Errorf("%d connections are still parked", n)
	}
	return nil
}
