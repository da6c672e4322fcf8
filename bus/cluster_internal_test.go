package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// TestRemoteSubscriptionPolicy: another node's subscription enters the
// router with its own policy, and one whose policy this node does not
// know is refused, saying why, rather than routed by another.
func TestRemoteSubscriptionPolicy(t *testing.T) {
	// Read once the bus is shut down, when nothing writes it any more.
	var logs bytes.Buffer
	s, err := New(&Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var refused []protocol.Policy
	for i, tt := range []struct {
		policy protocol.Policy
		routed bool
	}{
		{protocol.PolicyContinueAll, true},
		{protocol.PolicyStopOnStop, true},
		{"stopWhenBored", false},
		{"", false},
	} {
		topic := "remote" + string(rune('a'+i)) + ":x"
		s.cl.ApplySubscription(SubscriptionChange{Key: "b.1." + topic, Revision: uint64(i + 1), Subscription: SharedSubscription{
			Node: "b", Conn: 1, Pattern: topic, Policy: tt.policy, ClientID: "far",
		}})
		chain := s.router.route(topic)
		switch {
		case tt.routed && (len(chain) != 1 || chain[0].policy != tt.policy):
			t.Errorf("policy %q: chain %v, want the subscription under its own policy", tt.policy, chain)
		case !tt.routed && len(chain) != 0:
			t.Errorf("policy %q: routed under %q, want it refused", tt.policy, chain[0].policy)
		case !tt.routed:
			refused = append(refused, tt.policy)
		}
	}
	if err := s.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range refused {
		if !strings.Contains(logs.String(), fmt.Sprintf("policy=%q", p)) && !strings.Contains(logs.String(), "policy="+string(p)+"\n") {
			t.Errorf("policy %q refused without a log line naming it:\n%s", p, logs.String())
		}
	}
}

// TestRemoteDeliveryPastDeadline: a delivery another node asked for that
// waited on this node past the asking node's deadline is answered as a
// timeout, not sent: the asking node retries it, and sent as well it
// would be made twice.
func TestRemoteDeliveryPastDeadline(t *testing.T) {
	s, err := New(&Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	written := false
	answer := s.cl.Deliver(t.Context(), &RemoteDelivery{
		ClientID: "late", Conn: 1, Pattern: "*", Attempt: 1, Payload: []byte(`{}`),
		Deadline: time.Now().Add(-time.Millisecond), Written: func() { written = true },
	})
	var a remoteAnswer
	if err := json.Unmarshal(answer, &a); err != nil {
		t.Fatalf("answer %s: %v", answer, err)
	}
	if a.Kind != failTimeout || !strings.Contains(a.Detail, "not sent") || written {
		t.Errorf("answer %+v, written %v: want a timeout that says it was not sent", a, written)
	}
}

// TestRemoteSubscriberPendingCap: the stand-in of a subscriber on another
// node counts its retries against its grant's max_pending, which its
// subscription carries, and against the bus's cap when it carries none.
func TestRemoteSubscriberPendingCap(t *testing.T) {
	s, err := New(&Options{Logger: slog.New(slog.DiscardHandler), Limits: Limits{MaxPendingPerIdentity: 100}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	for i, tt := range []struct {
		maxPending, want int
	}{{3, 3}, {0, 100}} {
		topic := fmt.Sprintf("cap%d:x", i)
		s.cl.ApplySubscription(SubscriptionChange{Key: "b.1." + topic, Revision: uint64(i + 1), Subscription: SharedSubscription{
			Node: "b", Conn: uint64(i + 1), Pattern: topic, Policy: protocol.PolicyContinueAll, ClientID: "far", Identity: "far", MaxPending: tt.maxPending,
		}})
		chain := s.router.route(topic)
		if len(chain) != 1 {
			t.Fatalf("chain %v, want the remote subscription", chain)
		}
		in := chain[0].to.(*standIn)
		in.mu.Lock()
		got := in.pendingCapLocked(s.limits())
		in.mu.Unlock()
		if got != tt.want {
			t.Errorf("max_pending %d shared: cap %d, want %d", tt.maxPending, got, tt.want)
		}
	}
}
