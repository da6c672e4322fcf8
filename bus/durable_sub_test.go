package bus_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
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

// refused checks that r is an error with code whose message says what.
func refused(t *testing.T, r bustest.Response, code int64, what string) {
	t.Helper()
	require.NotNil(t, r.Error, "want error %d", code)
	assert.EqualValues(t, code, r.Error.Code)
	assert.Contains(t, r.Error.Message, what)
}

// startAway starts a bus with opts on which "owner" holds a durable
// subscription to pattern and has gone away.
func startAway(t *testing.T, opts *bus.Options, pattern string) *bustest.Server {
	t.Helper()
	srv := bustest.Start(t, opts)
	owner := bustest.Connect(t, srv.URL, "owner", bustest.Processed)
	subscribeDurable(t, owner, pattern, "")
	leave(t, srv.URL, owner, "owner")
	return srv
}

// TestDurableHeldWhileAwayDeliveredInOrderOnce: messages published while
// a durable subscriber is away are held for it, acked as held, and
// delivered once each, in the order they were published, when it
// subscribes again on a new connection; what is published after that
// comes after them.
func TestDurableHeldWhileAwayDeliveredInOrderOnce(t *testing.T) {
	srv := startAway(t, nil, "feed:x")

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
	srv := startAway(t, &bus.Options{HoldLifetime: 200 * time.Millisecond}, "feed:x")
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

// durableAuth starts a bus whose credentials are: "agent" (agent-*, may
// hold durable subscriptions to agent:*), "plain" (the same without
// durable), "waker" (may be a waker) and "ops" (admin).
func durableAuth(t *testing.T, opts *bus.Options) *bustest.Server {
	t.Helper()
	all := auth.Rules{Allow: []string{"agent:*", "system:client.*"}}
	cfg := auth.Config{Identities: []auth.Identity{
		{Name: "agent", TokenSHA256: authtest.SHA256("agent-token"), Grant: auth.Grant{ClientIDs: []string{"agent-*"}, Publish: all, Subscribe: all, Durable: true}},
		{Name: "plain", TokenSHA256: authtest.SHA256("plain-token"), Grant: auth.Grant{ClientIDs: []string{"plain-*"}, Publish: all, Subscribe: all}},
		{Name: "waker", TokenSHA256: authtest.SHA256("waker-token"), Grant: auth.Grant{ClientIDs: []string{"spawner"}, Publish: all, Subscribe: all, Waker: true}},
		{Name: "ops", TokenSHA256: authtest.SHA256("ops-token"), Grant: auth.Grant{ClientIDs: []string{"ops"}, Admin: true}},
	}}
	a, err := auth.New(cfg, t.TempDir())
	require.NoError(t, err)
	if opts == nil {
		opts = &bus.Options{}
	}
	opts.Auth = a
	return bustest.Start(t, opts)
}

// TestDurableNeedsGrant: subscribe with durable, subscriptions.setWaker
// and the admin methods are refused (-32010, naming what) to a credential
// whose grant lacks durable, waker or admin, and allowed with it.
func TestDurableNeedsGrant(t *testing.T) {
	srv := durableAuth(t, nil)
	plain, c := initialize(t, srv.URL, "plain-token", "plain-1", false)
	require.Zero(t, c)
	r := plain.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:plain-1", Durable: true})
	refused(t, r, protocol.CodeForbidden, "durable")
	r = plain.Call(protocol.MethodSubscriptionsWaker, protocol.SubscriptionsWakerParams{ClientID: "agent-1"})
	refused(t, r, protocol.CodeForbidden, "waker")
	for _, m := range []string{protocol.MethodSubscriptionsList, protocol.MethodSubscriptionsRemove} {
		assert.EqualValues(t, protocol.CodeForbidden, code(plain.Call(m, map[string]any{})), m)
	}
	// Without durable, the same pattern is fine.
	plain.Subscribe("agent:plain-1", "")

	agent, c := initialize(t, srv.URL, "agent-token", "agent-1", false)
	require.Zero(t, c)
	agent.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:agent-1", Durable: true}, nil)
	// Subscribing again durably is no error: it is held already.
	agent.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:agent-1", Durable: true}, nil)
	waker, c := initialize(t, srv.URL, "waker-token", "spawner", false)
	require.Zero(t, c)
	waker.MustCall(protocol.MethodSubscriptionsWaker, protocol.SubscriptionsWakerParams{ClientID: "agent-1"}, nil)
	ops, c := initialize(t, srv.URL, "ops-token", "ops", false)
	require.Zero(t, c)
	var list protocol.SubscriptionsListResult
	ops.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{}, &list)
	require.Len(t, list.Subscriptions, 1)
	assert.Equal(t, protocol.DurableSubscription{ClientID: "agent-1", Identity: "agent", Pattern: "agent:agent-1",
		Policy: protocol.PolicyStopOnProcessed, Created: list.Subscriptions[0].Created, Waker: "spawner"}, list.Subscriptions[0])
}

// TestDurableLimitPerIdentity: an identity holds at most
// MaxDurablePerIdentity durable subscriptions, across its clientIds;
// -32011 names the limit, and an unsubscribe makes room.
func TestDurableLimitPerIdentity(t *testing.T) {
	srv := durableAuth(t, &bus.Options{Limits: bus.Limits{MaxDurablePerIdentity: 2}})
	a1, _ := initialize(t, srv.URL, "agent-token", "agent-1", false)
	a2, _ := initialize(t, srv.URL, "agent-token", "agent-2", false)
	subscribeDurable(t, a1, "agent:a", "")
	subscribeDurable(t, a2, "agent:b", "")
	r := a2.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:c", Durable: true})
	refused(t, r, protocol.CodeLimitReached, "max_durable_per_identity")
	a1.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "agent:a"}, nil)
	subscribeDurable(t, a2, "agent:c", "")
}

// TestDurableAwayInChain: how an away durable subscriber takes part in
// a chain (docs/PROTOCOL.md, "Durable subscriptions"): its hold counts as
// processed, without stopPropagation, under its own policy.
func TestDurableAwayInChain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy protocol.Policy
		// older is whether the older, connected subscriber is asked too.
		older bool
	}{
		{"stopPropagationOnProcessed stops at the hold", protocol.PolicyStopOnProcessed, false},
		{"stopPropagationOnStop goes on", protocol.PolicyStopOnStop, true},
		{"continueAll goes on", protocol.PolicyContinueAll, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := bustest.Start(t, nil)
			seen := make(chan protocol.ProcessMessageParams, 4)
			older := bustest.Connect(t, srv.URL, "older", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
			older.Subscribe("agent:*", "")
			owner := bustest.Connect(t, srv.URL, "owner", bustest.Processed)
			subscribeDurable(t, owner, "agent:x", tc.policy)
			leave(t, srv.URL, owner, "owner")

			pub := bustest.Connect(t, srv.URL, "pub", nil)
			r := pub.Publish("agent:x", "m")
			require.True(t, r.Success)
			require.True(t, r.Acks[0].Held, "%+v", r.Acks)
			assert.Equal(t, "owner", r.Acks[0].ClientID)
			if tc.older {
				require.Len(t, r.Acks, 2, "%+v", r.Acks)
				assert.Equal(t, "older", r.Acks[1].ClientID)
				assert.True(t, r.Acks[1].Processed)
				assert.Equal(t, r.MessageID, recv(t, seen).MessageID)
			} else {
				require.Len(t, r.Acks, 1, "%+v", r.Acks)
			}
			assert.Equal(t, 1, pendingCount(t, srv), "held for the owner in every case")
		})
	}
	// A newer connected subscriber that processes stops the walk before
	// the away owner: nothing is held.
	srv := startAway(t, nil, "agent:*")
	newer := bustest.Connect(t, srv.URL, "newer", bustest.Processed)
	newer.Subscribe("agent:x", "")
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("agent:x", "m")
	require.Len(t, r.Acks, 1, "%+v", r.Acks)
	assert.Equal(t, "newer", r.Acks[0].ClientID)
	assert.Equal(t, 0, pendingCount(t, srv))
}

// TestDurableHeldCountsAgainstOwner: messages held for an away owner
// count against its pending cap; past it, the message is dead-lettered
// for the owner at once, and the ack says so.
func TestDurableHeldCountsAgainstOwner(t *testing.T) {
	srv := startAway(t, &bus.Options{Limits: bus.Limits{MaxPendingPerIdentity: 1}}, "feed:x")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	first := pub.Publish("feed:x", "one")
	require.True(t, first.Acks[0].Held)
	second := pub.Publish("feed:x", "two")
	assert.False(t, second.Acks[0].Held, "%+v", second.Acks[0])
	assert.NotEmpty(t, second.Acks[0].DeadLetter)
	assert.Contains(t, second.Acks[0].Error, "max_pending_per_identity")
	assert.Contains(t, second.Acks[0].Error, `"owner"`)
}

// TestDurableWakeEvent: a message held for an away owner with a waker
// sends system:client.wake, naming the owner and the waker; one without
// a waker does not.
func TestDurableWakeEvent(t *testing.T) {
	srv := bustest.Start(t, nil)
	events := make(chan protocol.ProcessMessageParams, 8)
	watcher := bustest.Connect(t, srv.URL, "spawner", attempts(events, protocol.ProcessMessageResult{}))
	watcher.Subscribe(protocol.TopicClientWake, protocol.PolicyContinueAll)
	for _, id := range []string{"woken", "sleeper"} {
		owner := bustest.Connect(t, srv.URL, id, bustest.Processed)
		subscribeDurable(t, owner, "feed:"+id, "")
		leave(t, srv.URL, owner, id)
	}
	watcher.MustCall(protocol.MethodSubscriptionsWaker, protocol.SubscriptionsWakerParams{ClientID: "woken"}, nil)
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	require.True(t, pub.Publish("feed:sleeper", "m").Acks[0].Held)
	require.True(t, pub.Publish("feed:woken", "m").Acks[0].Held)
	p := recv(t, events)
	var ev protocol.ClientEvent
	require.NoError(t, json.Unmarshal(p.Payload, &ev))
	assert.Equal(t, protocol.EventWake, ev.Event)
	assert.Equal(t, "woken", ev.ClientID)
	assert.Equal(t, "spawner", ev.Waker)
	assert.Equal(t, "feed:woken", ev.Pattern)
	assert.Equal(t, protocol.ReasonWakeMessage, ev.Reason)

	// The waker is asked once: a second message held soon after does not
	// ask again (rewakeAfter), so the next wake event, in the watcher's
	// queue after any such one, is the other owner's first.
	require.True(t, pub.Publish("feed:woken", "m2").Acks[0].Held)
	watcher.MustCall(protocol.MethodSubscriptionsWaker, protocol.SubscriptionsWakerParams{ClientID: "sleeper"}, nil)
	require.True(t, pub.Publish("feed:sleeper", "m2").Acks[0].Held)
	p = recv(t, events)
	require.NoError(t, json.Unmarshal(p.Payload, &ev))
	assert.Equal(t, "sleeper", ev.ClientID)
}

// TestDurableAdminRemove: subscriptions.remove ends an away owner's
// durable subscription: nothing more is held for it.
func TestDurableAdminRemove(t *testing.T) {
	srv := startAway(t, nil, "feed:x")
	ops := bustest.Connect(t, srv.URL, "ops", nil)
	ops.MustCall(protocol.MethodSubscriptionsRemove, protocol.SubscriptionsRemoveParams{ClientID: "owner", Topic: "feed:x"}, nil)
	assert.EqualValues(t, protocol.CodeNotFound, code(ops.Call(protocol.MethodSubscriptionsRemove, protocol.SubscriptionsRemoveParams{ClientID: "owner", Topic: "feed:x"})))
	r := ops.Publish("feed:x", "m")
	assert.False(t, r.Success)
	var list protocol.SubscriptionsListResult
	ops.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{}, &list)
	assert.Empty(t, list.Subscriptions)
}

// TestDurableDrainCutKeepsTheRest: an owner whose connection goes while
// its held messages are delivered leaves the rest held, the one cut off
// included; its next return delivers them all, in order.
func TestDurableDrainCutKeepsTheRest(t *testing.T) {
	srv := startAway(t, nil, "feed:x")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	var ids []string
	for i := range 3 {
		ids = append(ids, pub.Publish("feed:x", fmt.Sprint("m", i)).MessageID)
	}

	cut := make(chan string, 1)
	var flaky *bustest.Client
	flaky = bustest.Dial(t, srv.URL)
	flaky.OnProcess(func(p protocol.ProcessMessageParams) any {
		cut <- p.MessageID
		_ = flaky.WS.CloseNow()
		return protocol.ProcessMessageResult{Processed: true}
	})
	flaky.Initialize("owner")
	// The first held message may come before the answer, which the
	// handler's close then cuts off.
	flaky.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "feed:x", Durable: true})
	assert.Equal(t, ids[0], recv(t, cut))
	require.Eventually(t, func() bool {
		var r protocol.SubscriptionsListResult
		pub.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: "owner"}, &r)
		return len(r.Subscriptions) == 1 && r.Subscriptions[0].Away && r.Subscriptions[0].Held == 3
	}, bustest.Timeout, 10*time.Millisecond, "all three held again")

	seen := make(chan protocol.ProcessMessageParams, 8)
	back := bustest.Connect(t, srv.URL, "owner", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	subscribeDurable(t, back, "feed:x", "")
	for i := range 3 {
		assert.Equal(t, ids[i], recv(t, seen).MessageID, "delivery %d", i)
	}
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestDurableRetryHeldWhenOwnerLeaves: a retry for a durable subscriber
// that is away when it falls due is held for it instead of spending its
// attempts, and delivered when it is back.
func TestDurableRetryHeldWhenOwnerLeaves(t *testing.T) {
	opts := fastRetries(3)
	opts.RetryDelayCap = time.Minute
	srv := bustest.Start(t, opts)
	// A second before the retry: the owner is gone by then, however
	// loaded the machine; if not, a third attempt is left.
	owner := bustest.Connect(t, srv.URL, "owner", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 1}
	})
	subscribeDurable(t, owner, "feed:x", "")
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("feed:x", "m")
	require.True(t, r.Acks[0].Retrying, "%+v", r.Acks[0])
	leave(t, srv.URL, owner, "owner")
	require.Eventually(t, func() bool {
		var l protocol.SubscriptionsListResult
		lister := bustest.Connect(t, srv.URL, "lister", nil)
		defer lister.WS.CloseNow()
		lister.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: "owner"}, &l)
		return len(l.Subscriptions) == 1 && l.Subscriptions[0].Held == 1
	}, bustest.Timeout, 20*time.Millisecond, "the retry held for the owner")
	n, err := srv.Store.CountDeadLetters()
	require.NoError(t, err)
	require.Zero(t, n, "held, not tried and dead-lettered")

	seen := make(chan protocol.ProcessMessageParams, 2)
	back := bustest.Connect(t, srv.URL, "owner", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	subscribeDurable(t, back, "feed:x", "")
	p := recv(t, seen)
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.GreaterOrEqual(t, p.Attempt, 2)
}

// TestDurableResumeChecksTheConnection: an away owner's subscription is
// not taken back by a publish-only connection of its clientId, which
// does not hold the clientId. (Taking it back checks the credential's
// subscribe rules as a subscribe does.)
func TestDurableResumeChecksTheConnection(t *testing.T) {
	srv := durableAuth(t, nil)
	owner, _ := initialize(t, srv.URL, "agent-token", "agent-1", false)
	subscribeDurable(t, owner, "agent:agent-1", "")
	require.NoError(t, owner.WS.CloseNow())
	ops, _ := initialize(t, srv.URL, "ops-token", "ops", false)
	require.Eventually(t, func() bool {
		var r protocol.SubscriptionsListResult
		ops.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: "agent-1"}, &r)
		return len(r.Subscriptions) == 1 && r.Subscriptions[0].Away
	}, bustest.Timeout, 10*time.Millisecond)

	sender, c := initialize(t, srv.URL, "agent-token", "agent-1", true)
	require.Zero(t, c)
	r := sender.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "agent:agent-1", Durable: true})
	refused(t, r, protocol.CodeInvalidParams, "publishOnly")
	var list protocol.SubscriptionsListResult
	ops.MustCall(protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: "agent-1"}, &list)
	require.True(t, list.Subscriptions[0].Away, "still away")
}
