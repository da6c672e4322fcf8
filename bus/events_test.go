package bus_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// busEvent is what the tests read of a bus event's payload.
type busEvent struct {
	Event    string `json:"event"`
	ClientID string `json:"client_id"`
	Pattern  string `json:"pattern"`
}

func (e busEvent) String() string { return e.Event + " " + e.ClientID + " " + e.Pattern }

// nextAbout returns the next event on ch about one of clients, passing
// over the others (a subscriber of system:* hears of every client).
func nextAbout(t *testing.T, ch <-chan protocol.ProcessMessageParams, clients ...string) busEvent {
	t.Helper()
	for {
		p := recv(t, ch)
		var ev busEvent
		require.NoError(t, json.Unmarshal(p.Payload, &ev), "event payload %s", p.Payload)
		for _, c := range clients {
			if ev.ClientID == c {
				return ev
			}
		}
	}
}

// answering sends every delivery to seen and answers result.
func answering(seen chan<- protocol.ProcessMessageParams, result any) bustest.ProcessFunc {
	return func(p protocol.ProcessMessageParams) any {
		seen <- p
		return result
	}
}

// stalled starts a bus whose deliveries never time out within a test, and
// returns a handler that never answers until the returned release runs
// (at the latest when the test ends, before the bus shuts down). Under
// the event publisher the bus once had, one event at a time for every
// subscriber, such a subscriber held up every event for everyone.
func stalled(t *testing.T, opts bus.Options, seen chan<- protocol.ProcessMessageParams) (*bustest.Server, bustest.ProcessFunc, func()) {
	t.Helper()
	opts.DeliveryTimeout = time.Hour
	srv := bustest.Start(t, &opts)
	gate, ended := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(func() {
		close(ended)
		release()
	})
	return srv, func(p protocol.ProcessMessageParams) any {
		select {
		case seen <- p:
		case <-ended: // nobody reads seen any more
		}
		<-gate
		return protocol.ProcessMessageResult{}
	}, release
}

// TestSlowEventSubscriberDelaysOnlyItself: a subscriber of system:* that
// does not answer keeps no event from another subscriber, whether it sits
// before that subscriber in the chain (continueAll) or after it (a policy
// that could stop), and gets its own events afterwards, in order, one at a
// time.
func TestSlowEventSubscriberDelaysOnlyItself(t *testing.T) {
	for _, tc := range []struct {
		name string
		// slowNewer: the slow subscriber subscribes after the fast one,
		// so it comes first in every chain.
		slowNewer bool
		policy    protocol.Policy
	}{
		{"slow subscriber after the fast one in the chain", false, protocol.PolicyStopOnProcessed},
		{"slow continueAll subscriber before the fast one", true, protocol.PolicyContinueAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slowSeen := make(chan protocol.ProcessMessageParams, 64)
			srv, slowHandler, release := stalled(t, bus.Options{}, slowSeen)
			var slowCalls atomic.Int32
			slow := bustest.Connect(t, srv.URL, "slow", func(p protocol.ProcessMessageParams) any {
				slowCalls.Add(1)
				return slowHandler(p)
			})
			fastSeen := make(chan protocol.ProcessMessageParams, 64)
			fast := bustest.Connect(t, srv.URL, "fast", answering(fastSeen, protocol.ProcessMessageResult{}))
			if tc.slowNewer {
				fast.Subscribe("system:client.*", protocol.PolicyContinueAll)
				slow.Subscribe("system:*", tc.policy)
			} else {
				slow.Subscribe("system:*", tc.policy)
				fast.Subscribe("system:client.*", protocol.PolicyContinueAll)
			}
			// The slow subscriber now holds its first event unanswered.
			nextAbout(t, slowSeen, "slow", "fast")

			actor := bustest.Connect(t, srv.URL, "actor", nil)
			actor.Subscribe("a:1", "")
			actor.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "a:1"}, nil)
			actor.Subscribe("a:2", "")
			want := []string{"connected actor ", "subscribed actor a:1", "unsubscribed actor a:1", "subscribed actor a:2"}
			for _, w := range want {
				assert.Equal(t, w, nextAbout(t, fastSeen, "actor").String(), "fast subscriber")
			}
			assert.EqualValues(t, 1, slowCalls.Load(), "the slow subscriber was sent another event before it answered the first")

			release()
			for _, w := range want {
				assert.Equal(t, w, nextAbout(t, slowSeen, "actor").String(), "slow subscriber, once it answers")
			}
		})
	}
}

// TestEventsInOrderAcrossSubscriptions: a client that follows the
// lifecycle topics through separate subscriptions still hears of each
// client's connect before its subscribe: it is sent one event at a time,
// whichever subscription an event came under.
func TestEventsInOrderAcrossSubscriptions(t *testing.T) {
	srv := bustest.Start(t, nil)
	seen := make(chan protocol.ProcessMessageParams, 64)
	observer := bustest.Connect(t, srv.URL, "observer", answering(seen, protocol.ProcessMessageResult{}))
	observer.Subscribe(bus.TopicClientConnected, protocol.PolicyContinueAll)
	observer.Subscribe(bus.TopicClientSubscribed, protocol.PolicyContinueAll)
	for i := range 20 {
		id := fmt.Sprintf("actor-%d", i)
		bustest.Connect(t, srv.URL, id, nil).Subscribe("a:"+id, "")
		assert.Equal(t, "connected "+id+" ", nextAbout(t, seen, id).String())
		assert.Equal(t, "subscribed "+id+" a:"+id, nextAbout(t, seen, id).String())
	}
}

// TestEventWalkFollowsPolicies: a bus event goes down its chain like any
// message: an older subscriber gets it unless a newer one's policy and
// answer stop it.
func TestEventWalkFollowsPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy protocol.Policy
		answer protocol.ProcessMessageResult
		passes bool
	}{
		{protocol.PolicyContinueAll, protocol.ProcessMessageResult{Processed: true, StopPropagation: true}, true},
		{protocol.PolicyStopOnProcessed, protocol.ProcessMessageResult{Processed: true}, false},
		{protocol.PolicyStopOnProcessed, protocol.ProcessMessageResult{}, true},
		{protocol.PolicyStopOnStop, protocol.ProcessMessageResult{Processed: true}, true},
		{protocol.PolicyStopOnStop, protocol.ProcessMessageResult{StopPropagation: true}, false},
	} {
		t.Run(fmt.Sprintf("%s/%+v", tc.policy, tc.answer), func(t *testing.T) {
			srv := bustest.Start(t, nil)
			olderSeen := make(chan protocol.ProcessMessageParams, 64)
			older := bustest.Connect(t, srv.URL, "older", answering(olderSeen, protocol.ProcessMessageResult{}))
			// Patterns differ: of identical ones only the newest counts.
			older.Subscribe("system:*", protocol.PolicyContinueAll)
			newer := bustest.Connect(t, srv.URL, "newer", func(p protocol.ProcessMessageParams) any {
				var ev busEvent
				_ = json.Unmarshal(p.Payload, &ev)
				if ev.ClientID == "x" {
					return tc.answer
				}
				return protocol.ProcessMessageResult{}
			})
			newer.Subscribe("system:client.*", tc.policy)

			bustest.Connect(t, srv.URL, "x", nil)
			bustest.Connect(t, srv.URL, "y", nil)
			// Events reach a subscriber in order, so y's event coming first
			// means x's never will.
			got := nextAbout(t, olderSeen, "x", "y")
			if tc.passes {
				assert.Equal(t, "connected x ", got.String())
			} else {
				assert.Equal(t, "connected y ", got.String())
			}
		})
	}
}

// TestClientEventsSurviveSubscriptionChurn: thousands of subscriptions
// made and dropped quickly, far more than any queue bound, while another
// subscriber of system:* does not answer, reach a subscriber that does,
// every one in order, and none is counted as dropped. (The bus once
// dropped 15,455 of 100,000.)
func TestClientEventsSurviveSubscriptionChurn(t *testing.T) {
	// Mostly waiting (or busy on its own bus): it overlaps the others.
	t.Parallel()
	n := 1000 // 2,000 events, twice the old queue bound
	if testing.Short() {
		n = 600
	}
	slowSeen := make(chan protocol.ProcessMessageParams, 1)
	srv, slowHandler, _ := stalled(t, bus.Options{}, slowSeen)
	bustest.Connect(t, srv.URL, "slow", slowHandler).Subscribe("system:*", protocol.PolicyContinueAll)

	watcherSeen := make(chan protocol.ProcessMessageParams, 256)
	watcher := bustest.Connect(t, srv.URL, "watcher", answering(watcherSeen, protocol.ProcessMessageResult{}))
	watcher.Subscribe("system:client.*", protocol.PolicyContinueAll)

	actor := bustest.Connect(t, srv.URL, "actor", nil)
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := range n {
			topic := fmt.Sprintf("churn:%d", i)
			if r := actor.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: topic}); r.Error != nil {
				t.Errorf("subscribe %s: %v", topic, r.Error)
				return
			}
			if r := actor.Call(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: topic}); r.Error != nil {
				t.Errorf("unsubscribe %s: %v", topic, r.Error)
				return
			}
		}
	}()
	start := time.Now()
	require.Equal(t, "connected actor ", nextAbout(t, watcherSeen, "actor").String())
	for i := range n {
		topic := fmt.Sprintf("churn:%d", i)
		require.Equal(t, "subscribed actor "+topic, nextAbout(t, watcherSeen, "actor").String())
		require.Equal(t, "unsubscribed actor "+topic, nextAbout(t, watcherSeen, "actor").String())
	}
	recv(t, churned)
	t.Logf("%d subscribe/unsubscribe pairs, every event delivered, in %s (a shared machine; not asserted)", n, time.Since(start))
	for key, v := range series(t, srv.Registry(), "bub_events_dropped_total") {
		assert.Zero(t, v, "bub_events_dropped_total{%s}", key)
	}
}

// TestDeadLetterEventsDroppedForFullQueueOnly: when more than 1,024
// system:message.* events wait for a subscriber that does not answer, the
// rest are dropped for it alone, and counted; another subscriber gets
// every one.
func TestDeadLetterEventsDroppedForFullQueueOnly(t *testing.T) {
	// Mostly waiting (or busy on its own bus): it overlaps the others.
	t.Parallel()
	const queue, extra = 1024, 40
	slowSeen := make(chan protocol.ProcessMessageParams, 1)
	srv, slowHandler, release := stalled(t, bus.Options{MaxAttempts: 1}, slowSeen)

	watcherSeen := make(chan protocol.ProcessMessageParams, 256)
	watcher := bustest.Connect(t, srv.URL, "watcher", answering(watcherSeen, protocol.ProcessMessageResult{}))
	watcher.Subscribe("system:message.*", protocol.PolicyContinueAll)
	bustest.Connect(t, srv.URL, "failing", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true}
	}).Subscribe("jobs:*", "")

	publisher := bustest.Connect(t, srv.URL, "publisher", nil)
	// Last, so that the one event in its queue before the dead letters is
	// that of its own subscription, which it holds unanswered.
	bustest.Connect(t, srv.URL, "slow", slowHandler).Subscribe("system:*", protocol.PolicyContinueAll)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range queue + extra {
			if r := publisher.Call(protocol.MethodSendMessage, map[string]any{"topic": fmt.Sprintf("jobs:%d", i), "payload": map[string]any{"type": "x"}}); r.Error != nil {
				t.Errorf("publish %d: %v", i, r.Error)
				return
			}
		}
	}()
	for i := range queue + extra {
		p := recv(t, watcherSeen)
		require.Equal(t, bus.TopicDeadLettered, p.Topic)
		var dl struct {
			Topic string `json:"topic"`
		}
		require.NoError(t, json.Unmarshal(p.Payload, &dl))
		require.Equal(t, fmt.Sprintf("jobs:%d", i), dl.Topic, "the watcher's events in order")
	}
	recv(t, published)
	// The slow subscriber's own event is out to it, and has its place in
	// the queue until answered, as do the failing subscriber's busy and
	// idle events, which are never dropped: at least one dead letter more
	// than extra found it full, and nothing else was dropped.
	dropped := series(t, srv.Registry(), "bub_events_dropped_total")
	key := "reason=subscriber_queue_full,topic=" + bus.TopicDeadLettered + ","
	assert.GreaterOrEqual(t, dropped[key], float64(extra+1))
	assert.Len(t, dropped, 1, "only dead letters dropped: %v", dropped)
	release()
}

// TestEventBacklogDisconnects: system:client.* events are never dropped,
// so a subscriber that lets too many of them wait is disconnected instead
// of holding an ever longer queue in the bus's memory; the others go on.
func TestEventBacklogDisconnects(t *testing.T) {
	bus.SetMaxEventBacklog(t, 20)
	slowSeen := make(chan protocol.ProcessMessageParams, 1)
	srv, slowHandler, _ := stalled(t, bus.Options{}, slowSeen)
	slow := bustest.Connect(t, srv.URL, "slow", slowHandler)
	slow.Subscribe("system:*", protocol.PolicyContinueAll)
	watcherSeen := make(chan protocol.ProcessMessageParams, 256)
	bustest.Connect(t, srv.URL, "watcher", answering(watcherSeen, protocol.ProcessMessageResult{})).Subscribe("system:client.*", protocol.PolicyContinueAll)
	actor := bustest.Connect(t, srv.URL, "actor", nil)
	require.Equal(t, "connected actor ", nextAbout(t, watcherSeen, "actor").String())
	// In step with the watcher, so that only the stalled subscriber's
	// queue grows, however slow the machine.
	for i := range 30 {
		actor.Subscribe(fmt.Sprintf("churn:%d", i), "")
		require.Equal(t, fmt.Sprintf("subscribed actor churn:%d", i), nextAbout(t, watcherSeen, "actor").String())
	}
	if st := slow.Closed(); st != websocket.StatusPolicyViolation {
		t.Fatalf("slow subscriber closed with %d, want %d", st, websocket.StatusPolicyViolation)
	}
}

// TestClientBusyAndIdleEvents: a client's first message in flight is
// reported on system:client.busy, and the end of its last one, answered
// or not, on system:client.idle; messages that overlap make one pair, and
// the bus's own events, delivered to the observer, report nobody busy.
func TestClientBusyAndIdleEvents(t *testing.T) {
	t.Parallel()
	srv := bustest.Start(t, &bus.Options{})
	seen := make(chan protocol.ProcessMessageParams, 64)
	bustest.Connect(t, srv.URL, "watcher", answering(seen, protocol.ProcessMessageResult{})).Subscribe(protocol.ClientEventsPattern, protocol.PolicyContinueAll)

	gate := make(chan struct{})
	started := make(chan struct{}, 2)
	worker := bustest.Connect(t, srv.URL, "worker", func(protocol.ProcessMessageParams) any {
		started <- struct{}{}
		<-gate
		return protocol.ProcessMessageResult{Processed: true}
	})
	worker.Subscribe("jobs:*", "")
	require.Equal(t, "connected worker ", nextAbout(t, seen, "worker").String())
	require.Equal(t, "subscribed worker jobs:*", nextAbout(t, seen, "worker").String())

	publisher := bustest.Connect(t, srv.URL, "publisher", nil)
	published := make(chan struct{})
	go func() {
		defer close(published)
		var wg sync.WaitGroup
		for _, topic := range []string{"jobs:1", "jobs:2"} {
			wg.Go(func() { publisher.Publish(topic, "job") })
		}
		wg.Wait()
	}()
	recv(t, started)
	recv(t, started)
	require.Equal(t, "busy worker ", nextAbout(t, seen, "worker", "watcher").String())
	close(gate)
	recv(t, published)
	require.Equal(t, "idle worker ", nextAbout(t, seen, "worker", "watcher").String())
}
