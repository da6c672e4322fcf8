package bus

import "testing"

// SetMaxEventBacklog lowers the system:client.* backlog that disconnects a
// subscriber, for the test's duration; the test must not run in parallel.
func SetMaxEventBacklog(t testing.TB, n int) {
	old := maxEventBacklog
	maxEventBacklog = n
	t.Cleanup(func() { maxEventBacklog = old })
}
