package a2a_test

import (
	"testing"

	"github.com/bub-bus/bub/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: every
// stream, publish and bus connection must end with the test.
func TestMain(m *testing.M) { leakcheck.Main(m) }
