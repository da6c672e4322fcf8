package cluster_test

import (
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run if a node leaves a goroutine behind: Close (and
// a crash) must end the watchers, the heartbeat, the handlers and the
// embedded server's.
func TestMain(m *testing.M) { leakcheck.Main(m) }
