package bus_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

func subscribeFallback(t *testing.T, c *bustest.Client, pattern string) {
	t.Helper()
	c.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: pattern, Fallback: true}, nil)
}

// TestFallbackSpawnsThenDelivers plays the default handler: the fallback
// "spawns" an agent (a new client that subscribes to the topic), then asks
// for a retry, and the bus routes the original message to the new agent.
func TestFallbackSpawnsThenDelivers(t *testing.T) {
	srv := bustest.Start(t, nil)
	delivered := make(chan protocol.ProcessMessageParams, 1)
	spawned := 0
	spawner := bustest.Dial(t, srv.URL)
	spawner.OnProcess(func(p protocol.ProcessMessageParams) any {
		spawned++
		agent := bustest.Connect(t, srv.URL, fmt.Sprint("agent-", spawned), func(p protocol.ProcessMessageParams) any {
			delivered <- p
			return protocol.ProcessMessageResult{Processed: true}
		})
		agent.Subscribe(p.Topic, "")
		return protocol.ProcessMessageResult{ShouldRetry: true, Message: "spawned agent-1"}
	})
	spawner.Initialize("spawner")
	subscribeFallback(t, spawner, "tg:*")

	pub := bustest.Connect(t, srv.URL, "bridge", nil)
	r := pub.Publish("tg:123", "telegram_message")
	assert.True(t, r.Success, "a message only a fallback received counts as routed")
	require.Len(t, r.Acks, 1)
	assert.Equal(t, "spawner", r.Acks[0].ClientID)
	assert.True(t, r.Acks[0].Retrying)

	p := recv(t, delivered)
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.Equal(t, "bridge", p.From)
	assert.Equal(t, "tg:123", p.Subscription)

	// The next message to the chat goes to the agent, not the fallback.
	r = pub.Publish("tg:123", "telegram_message")
	assert.Equal(t, "agent-1", r.Acks[0].ClientID)
	recv(t, delivered)
	assert.Equal(t, 1, spawned)
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestFallbackRerouteWaitsAsAsked: a fallback that asks for the message
// to be routed again after retry_seconds is asked again no sooner, however
// often, until the hold lifetime ends; the routings do not use up
// MaxAttempts. (Its own fallback subscription once made every re-hold due
// at once: all attempts within milliseconds.)
func TestFallbackRerouteWaitsAsAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const asked = 100 * time.Millisecond
		const lifetime = 450 * time.Millisecond
		opts := fastRetries(2)
		opts.HoldLifetime = lifetime
		srv := bustest.StartInMemory(t, opts)
		var mu sync.Mutex
		var times []time.Time
		spawner := bustest.Connect(t, srv.URL, "spawner", func(protocol.ProcessMessageParams) any {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: asked.Seconds(), Message: "at capacity"}
		})
		subscribeFallback(t, spawner, "tg:*")
		pub := bustest.Connect(t, srv.URL, "bridge", nil)
		r := pub.Publish("tg:9", "telegram_message")
		require.Len(t, r.Acks, 1)
		require.True(t, r.Acks[0].Retrying, "the fallback's ack says the message is kept: %+v", r.Acks[0])
		d := onlyDeadLetter(t, pub)
		assert.Equal(t, protocol.ReasonNoSubscribers, d.Reason)
		assert.GreaterOrEqual(t, d.DeadAt.Sub(d.FirstAttempt), lifetime, "dead-lettered before the hold lifetime ended")

		mu.Lock()
		defer mu.Unlock()
		// 0, 100, 200, 300, 400 ms; the lifetime ends before the sixth.
		assert.Greater(t, len(times), opts.MaxAttempts, "rerouting is bounded by the lifetime, not by MaxAttempts")
		for i := 1; i < len(times); i++ {
			assert.GreaterOrEqual(t, times[i].Sub(times[i-1]), asked, "routing %d came sooner than the fallback asked", i+1)
		}
		assert.Len(t, d.Attempts, len(times)+1, "one attempt per routing, and the end of the lifetime")
	})
}

// TestTwoFallbacksWaitAsAsked: with two fallbacks on a topic, both asked
// in each pass, neither one's presence brings forward the wait the other
// asked for.
func TestTwoFallbacksWaitAsAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const asked = 100 * time.Millisecond
		opts := fastRetries(2)
		opts.HoldLifetime = 350 * time.Millisecond
		srv := bustest.StartInMemory(t, opts)
		var mu sync.Mutex
		calls := map[string][]time.Time{}
		// Different patterns: of identical ones only the newest is routed to.
		for id, pattern := range map[string]string{"spawner-a": "tg:*", "spawner-b": "tg:2"} {
			fb := bustest.Connect(t, srv.URL, id, func(protocol.ProcessMessageParams) any {
				mu.Lock()
				calls[id] = append(calls[id], time.Now())
				mu.Unlock()
				return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: asked.Seconds()}
			})
			subscribeFallback(t, fb, pattern)
		}
		pub := bustest.Connect(t, srv.URL, "bridge", nil)
		pub.Publish("tg:2", "telegram_message")
		onlyDeadLetter(t, pub)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, 2, "both fallbacks are asked")
		for id, times := range calls {
			assert.LessOrEqual(t, len(times), 4, "%s asked %d times within 350 ms", id, len(times))
			for i := 1; i < len(times); i++ {
				assert.GreaterOrEqual(t, times[i].Sub(times[i-1]), asked, "%s: routing %d came sooner than asked", id, i+1)
			}
		}
	})
}

// TestOnlyAnotherSubscriberWakesAReroute: the fallback that asked to wait
// subscribing again (as a reconnecting spawner does) does not bring the
// message forward; another client's subscription does, at once.
func TestOnlyAnotherSubscriberWakesAReroute(t *testing.T) {
	srv := bustest.Start(t, nil)
	calls := make(chan struct{}, 10)
	spawner := bustest.Connect(t, srv.URL, "spawner", func(protocol.ProcessMessageParams) any {
		calls <- struct{}{}
		return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 60}
	})
	subscribeFallback(t, spawner, "tg:*")
	pub := bustest.Connect(t, srv.URL, "bridge", nil)
	r := pub.Publish("tg:5", "telegram_message")
	require.True(t, r.Acks[0].Retrying)
	recv(t, calls)

	subscribeFallback(t, spawner, "tg:5")
	again := bustest.Connect(t, srv.URL, "spawner", nil) // a takeover, as after a reconnect
	subscribeFallback(t, again, "tg:*")
	// Subscribe wakes holds before it answers. A woken hold is due now
	// until its attempt's answer pushes it back, and that answer comes
	// after the call is counted: so either check catches a wake.
	due := bus.HeldUntil(srv.Server, "tg:5")
	require.Len(t, due, 1)
	assert.True(t, due[0].After(time.Now()), "the fallback's own subscriptions woke the message it asked to wait")
	assert.Empty(t, calls, "the fallback's own subscriptions woke the message it asked to wait")

	delivered := make(chan protocol.ProcessMessageParams, 1)
	start := time.Now()
	agent := bustest.Connect(t, srv.URL, "agent-5", func(p protocol.ProcessMessageParams) any {
		delivered <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	agent.Subscribe("tg:5", "")
	p := recv(t, delivered)
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.Less(t, time.Since(start), 10*time.Second, "the agent's subscription did not wake the message")
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

func TestLifecycleEvents(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{ServerID: "bus-events"})
	events := make(chan protocol.ProcessMessageParams, 20)
	watcher := bustest.Connect(t, srv.URL, "watcher", func(p protocol.ProcessMessageParams) any {
		events <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	watcher.Subscribe("system:client.*", "")

	c := bustest.Connect(t, srv.URL, "agent-7", nil)
	c.Subscribe("tg:7", "")
	subscribeFallback(t, c, "tg:*")
	c.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "tg:7"}, nil)
	_ = c.WS.CloseNow()

	type ev struct {
		Type     string `json:"type"`
		Event    string `json:"event"`
		ClientID string `json:"client_id"`
		Pattern  string `json:"pattern"`
		Fallback bool   `json:"fallback"`
	}
	want := []ev{
		{"client_event", "connected", "agent-7", "", false},
		{"client_event", "subscribed", "agent-7", "tg:7", false},
		{"client_event", "subscribed", "agent-7", "tg:*", true},
		{"client_event", "unsubscribed", "agent-7", "tg:7", false},
		{"client_event", "disconnected", "agent-7", "", false},
	}
	for _, w := range want {
		var got ev
		var p protocol.ProcessMessageParams
		for got.ClientID != "agent-7" { // the watcher hears of its own subscription too
			p, got = recv(t, events), ev{}
			require.NoError(t, json.Unmarshal(p.Payload, &got))
		}
		assert.Equal(t, "system:client."+w.Event, p.Topic)
		assert.Equal(t, "bus-events", p.From)
		assert.Equal(t, w, got)
	}
}
