package bus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// subscribeDurable subscribes c durably to pattern.
func subscribeDurable(t *testing.T, c *bustest.Client, pattern string, policy protocol.Policy) {
	t.Helper()
	c.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: pattern, Policy: policy, Durable: true}, nil)
}

// leave disconnects c, the owner of durable subscriptions, and waits
// until the bus holds them for it as away.
func leave(t *testing.T, url string, c *bustest.Client, clientID string) {
	t.Helper()
	require.NoError(t, c.WS.CloseNow())
	watch := bustest.Dial(t, url)
	watch.Initialize("watch-" + clientID)
	require.Eventually(t, func() bool {
		var r protocol.SubscriptionsListResult
		watch.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: clientID}, &r)
		for _, sub := range r.Subscriptions {
			if !sub.Away {
				return false
			}
		}
		return len(r.Subscriptions) > 0
	}, bustest.Timeout, 10*time.Millisecond)
	watch.WS.CloseNow()
}

// TestDurableHeldWhileAwayDeliveredInOrderOnce: messages published while
// a durable subscriber is away are held for it, acked as held, and
// delivered once each, in the order they were published, when it
// subscribes again on a new connection; what is published after that
// comes after them.
func TestDurableHeldWhileAwayDeliveredInOrderOnce(t *testing.T) {
	srv := bustest.Start(t, nil)
	owner := bustest.Connect(t, srv.URL, "owner", bustest.Processed)
	subscribeDurable(t, owner, "feed:x", "")
	leave(t, srv.URL, owner, "owner")

	pub := bustest.Connect(t, srv.URL, "pub", nil)
	var ids []string
	for i := range 5 {
		r := pub.Publish("feed:x", fmt.Sprintf("m%d", i))
		require.True(t, r.Success, "%+v", r)
		require.Len(t, r.Acks, 1)
		assert.True(t, r.Acks[0].Held, "ack %+v", r.Acks[0])
		assert.Equal(t, "owner", r.Acks[0].ClientID)
		assert.Empty(t, r.Acks[0].Error)
		assert.NotEmpty(t, r.Acks[0].NextAttempt)
		ids = append(ids, r.MessageID)
	}
	require.Equal(t, 5, pendingCount(t, srv))

	seen := make(chan protocol.ProcessMessageParams, 16)
	back := bustest.Connect(t, srv.URL, "owner", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	subscribeDurable(t, back, "feed:x", "")
	for i := range 5 {
		p := recv(t, seen)
		assert.Equal(t, ids[i], p.MessageID, "delivery %d out of order", i)
		assert.Equal(t, "feed:x", p.Subscription)
	}
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
	r := pub.Publish("feed:x", "live")
	require.Len(t, r.Acks, 1)
	assert.True(t, r.Acks[0].Processed, "live delivery: %+v", r.Acks[0])
	assert.Equal(t, r.MessageID, recv(t, seen).MessageID)
	select {
	case p := <-seen:
		t.Fatalf("delivered again: %+v", p)
	default:
	}
}

// TestDurableSurvivesRestart: a durable subscription and the messages
// held for its away owner are in the store; a new bus on it holds new
// messages for the owner too, and delivers every one when it is back.
func TestDurableSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	first := bustest.Start(t, &bus.Options{Store: st})
	owner := bustest.Connect(t, first.URL, "owner", bustest.Processed)
	subscribeDurable(t, owner, "feed:*", "")
	leave(t, first.URL, owner, "owner")
	pub := bustest.Connect(t, first.URL, "pub", nil)
	before := pub.Publish("feed:a", "before")
	require.True(t, before.Acks[0].Held)
	require.NoError(t, first.Shutdown(t.Context()))
	require.NoError(t, st.Close())

	st, err = store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	second := bustest.Start(t, &bus.Options{Store: st})
	pub = bustest.Connect(t, second.URL, "pub", nil)
	after := pub.Publish("feed:b", "after")
	require.Len(t, after.Acks, 1, "the restored durable subscription routes")
	require.True(t, after.Acks[0].Held)

	seen := make(chan protocol.ProcessMessageParams, 4)
	back := bustest.Connect(t, second.URL, "owner", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	subscribeDurable(t, back, "feed:*", "")
	assert.Equal(t, before.MessageID, recv(t, seen).MessageID)
	assert.Equal(t, after.MessageID, recv(t, seen).MessageID)
	require.Eventually(t, func() bool { return pendingCount(t, second) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestDurableUnsubscribeEnds: the owner's unsubscribe ends the durable
// subscription: once it is away, nothing is held for it.
func TestDurableUnsubscribeEnds(t *testing.T) {
	srv := bustest.Start(t, nil)
	owner := bustest.Connect(t, srv.URL, "owner", bustest.Processed)
	subscribeDurable(t, owner, "feed:x", "")
	owner.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "feed:x"}, nil)
	require.NoError(t, owner.WS.CloseNow())
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("feed:x", "m")
	assert.False(t, r.Success)
	assert.Equal(t, protocol.ReasonNoSubscribers, r.Reason)
}

// TestDurableHoldLifetimeDeadLetters: a message held for an owner that
// does not come back is dead-lettered when its hold lifetime ends.
func TestDurableHoldLifetimeDeadLetters(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{HoldLifetime: 200 * time.Millisecond})
	owner := bustest.Connect(t, srv.URL, "owner", bustest.Processed)
	subscribeDurable(t, owner, "feed:x", "")
	leave(t, srv.URL, owner, "owner")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("feed:x", "m")
	require.True(t, r.Acks[0].Held)
	require.Eventually(t, func() bool {
		n, err := srv.Store.CountDeadLetters()
		return err == nil && n == 1
	}, bustest.Timeout, 10*time.Millisecond)
	list := dlqList(t, pub, protocol.DLQListParams{})
	require.Len(t, list.Entries, 1)
	assert.Equal(t, r.MessageID, list.Entries[0].MessageID)
	assert.Equal(t, "owner", list.Entries[0].ClientID)
	assert.Equal(t, protocol.ReasonSubscriberGone, list.Entries[0].Reason)
	assert.Equal(t, 0, pendingCount(t, srv))
}
