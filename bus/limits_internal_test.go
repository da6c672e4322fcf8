package bus

import (
	"testing"
)

// TestPendingFullAllocatesOnlyToRefuse: the pending caps are checked on
// every publish, so a check that finds room allocates nothing; a cap
// reached is named.
func TestPendingFullAllocatesOnlyToRefuse(t *testing.T) {
	s, err := New(&Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	l := s.limits()
	if _, err := s.limitState.pendingFull(l, "alice", 10, true); err != nil {
		t.Fatal(err) // builds the store's counts, once
	}
	var full *pendingCap
	if n := testing.AllocsPerRun(100, func() { full, err = s.limitState.pendingFull(l, "alice", 10, true) }); n != 0 || full != nil || err != nil {
		t.Errorf("pendingFull with room: %v allocations, cap %v, err %v; want 0, nil, nil", n, full, err)
	}
	full, err = s.limitState.pendingFull(l, "alice", 0, true)
	if err != nil || full == nil || full.limit != limitPendingPerIdentity {
		t.Errorf("pendingFull at a cap of 0: %+v, %v; want %s", full, err, limitPendingPerIdentity)
	}
}
