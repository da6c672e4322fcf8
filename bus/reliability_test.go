package bus_test

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// fastRetries keeps retry delays short enough for tests.
func fastRetries(maxAttempts int) *bus.Options {
	return &bus.Options{MaxAttempts: maxAttempts, RetryBaseDelay: 20 * time.Millisecond, RetryDelayCap: 200 * time.Millisecond, DeliveryTimeout: 500 * time.Millisecond}
}

// attempts answers each delivery with the result for its attempt number
// (the last one repeats) and sends every delivery's params to seen.
func attempts(seen chan<- protocol.ProcessMessageParams, results ...any) bustest.ProcessFunc {
	return func(p protocol.ProcessMessageParams) any {
		seen <- p
		return results[min(p.Attempt, len(results))-1]
	}
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bustest.Timeout):
		t.Fatal("nothing received")
	}
	var zero T
	return zero
}

func dlqList(t *testing.T, c *bustest.Client, params protocol.DLQListParams) protocol.DLQListResult {
	t.Helper()
	var r protocol.DLQListResult
	c.MustCall(protocol.MethodDLQList, params, &r)
	return r
}

// onlyDeadLetter waits until the dead-letter queue holds exactly one
// entry, as c lists it, and returns it.
func onlyDeadLetter(t *testing.T, c *bustest.Client) protocol.DeadLetter {
	t.Helper()
	var list protocol.DLQListResult
	require.Eventually(t, func() bool {
		list = dlqList(t, c, protocol.DLQListParams{})
		return len(list.Entries) == 1
	}, bustest.Timeout, 20*time.Millisecond, "one dead letter")
	return list.Entries[0]
}

func TestRetryPaths(t *testing.T) {
	retry := protocol.ProcessMessageResult{ShouldRetry: true, Message: "busy"}
	ok := protocol.ProcessMessageResult{Processed: true}
	tests := []struct {
		name    string
		first   any
		inError string
	}{
		{"should_retry", retry, ""},
		{"should_retry with retry_seconds", protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 0.05}, ""},
		{"error response", &protocol.Error{Code: -32000, Message: "kaput"}, "kaput"},
		{"timeout", nil, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, fastRetries(5))
			seen := make(chan protocol.ProcessMessageParams, 10)
			late, gaveUp := slowerThanTimeout(t)
			sub := bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
				seen <- p
				if p.Attempt > 1 {
					return ok
				}
				if tt.first == nil {
					late()
				}
				return tt.first
			})
			sub.Subscribe("work:*", "")
			before := time.Now()
			r := bustest.Connect(t, srv.URL, "pub", nil).Publish("work:1", "job")
			gaveUp()
			require.Len(t, r.Acks, 1)
			ack := r.Acks[0]
			assert.True(t, ack.Retrying)
			assert.Equal(t, 2, ack.Attempt)
			next, err := time.Parse(time.RFC3339Nano, ack.NextAttempt)
			require.NoError(t, err)
			assert.True(t, next.After(before) && next.Before(before.Add(2*time.Second)), "next attempt %s", next)
			assert.Contains(t, ack.Error, tt.inError)

			assert.Equal(t, 1, recv(t, seen).Attempt)
			second := recv(t, seen)
			assert.Equal(t, 2, second.Attempt)
			assert.Equal(t, r.MessageID, second.MessageID)
			assert.Equal(t, "work:*", second.Subscription)
			require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
		})
	}
}

// slowerThanTimeout makes a subscriber slower than the delivery timeout,
// whatever the timeout and however loaded the machine: the subscriber
// calls late, which returns once the test calls gaveUp (when the
// publish has its ack, so the bus has given up on the delivery), or the
// test ends. A sleep longer than the timeout would be a bet on the
// scheduler.
func slowerThanTimeout(t *testing.T) (late, gaveUp func()) {
	done := make(chan struct{})
	gaveUp = sync.OnceFunc(func() { close(done) })
	t.Cleanup(gaveUp) // before the bus and the subscriber close
	return func() { <-done }, gaveUp
}

func pendingCount(t *testing.T, srv *bustest.Server) int {
	t.Helper()
	n, err := srv.Store.CountPending()
	require.NoError(t, err)
	return n
}

func TestRetrySecondsHonouredAndCapped(t *testing.T) {
	// An hour, and a value whose nanoseconds overflow a time.Duration.
	for _, seconds := range []float64{3600, 1e12} {
		opts := fastRetries(5)
		srv := bustest.Start(t, opts)
		sub := bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
			return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: seconds}
		})
		sub.Subscribe("a", "")
		before := time.Now()
		r := bustest.Connect(t, srv.URL, "pub", nil).Publish("a", "t")
		next, err := time.Parse(time.RFC3339Nano, r.Acks[0].NextAttempt)
		require.NoError(t, err)
		assert.WithinDuration(t, before.Add(opts.RetryDelayCap), next, 150*time.Millisecond, "retry_seconds %g is capped at RetryDelayCap", seconds)
	}
}

// TestHandledDropsRetries: when a later subscriber handles the message, an
// earlier one's request for a retry is dropped.
func TestHandledDropsRetries(t *testing.T) {
	srv := bustest.Start(t, fastRetries(5))
	var calls atomic.Int32
	older := bustest.Connect(t, srv.URL, "older", bustest.Processed)
	older.Subscribe("x:*", "")
	newer := bustest.Connect(t, srv.URL, "newer", func(protocol.ProcessMessageParams) any {
		calls.Add(1)
		return protocol.ProcessMessageResult{ShouldRetry: true}
	})
	newer.Subscribe("x:1", "")
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("x:1", "t")
	require.Len(t, r.Acks, 2)
	assert.False(t, r.Acks[0].Retrying, "the message was handled by older; no retry for newer")
	assert.True(t, r.Acks[1].Processed)
	// Retries are stored and scheduled before the result is sent: none
	// stored and none scheduled means none will come.
	assert.Equal(t, 0, pendingCount(t, srv))
	assert.Zero(t, metric(t, srv, "bub_retries_scheduled_total", ""), "a retry was scheduled for newer")
	assert.Equal(t, int32(1), calls.Load())
}

// TestReconnectBeforeRetry: a retry goes to the client identity, so the
// client gets it on its new connection.
func TestReconnectBeforeRetry(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{RetryBaseDelay: 300 * time.Millisecond, RetryDelayCap: time.Second})
	var first *bustest.Client
	first = bustest.Connect(t, srv.URL, "agent-1", func(protocol.ProcessMessageParams) any {
		_ = first.WS.CloseNow() // drop mid-delivery
		return nil
	})
	first.Subscribe("agent:1", "")
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("agent:1", "t")
	require.True(t, r.Acks[0].Retrying)
	assert.Contains(t, r.Acks[0].Error, "disconnected")

	seen := make(chan protocol.ProcessMessageParams, 1)
	second := bustest.Connect(t, srv.URL, "agent-1", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	second.Subscribe("agent:1", "")
	p := recv(t, seen)
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.Equal(t, 2, p.Attempt)
}

func TestExhaustionDeadLetters(t *testing.T) {
	tests := []struct {
		name   string
		answer func(sub **bustest.Client) bustest.ProcessFunc
		reason string
	}{
		{"max_retries", func(**bustest.Client) bustest.ProcessFunc {
			return func(protocol.ProcessMessageParams) any {
				return protocol.ProcessMessageResult{ShouldRetry: true, Message: "later"}
			}
		}, protocol.ReasonMaxRetries},
		{"subscriber_gone", func(sub **bustest.Client) bustest.ProcessFunc {
			return func(protocol.ProcessMessageParams) any { _ = (*sub).WS.CloseNow(); return nil }
		}, protocol.ReasonSubscriberGone},
		{"rejected", func(**bustest.Client) bustest.ProcessFunc {
			return func(p protocol.ProcessMessageParams) any {
				if p.Attempt == 1 {
					return protocol.ProcessMessageResult{ShouldRetry: true}
				}
				return protocol.ProcessMessageResult{Processed: false, Message: "not for me"}
			}
		}, protocol.ReasonRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, fastRetries(3))
			events := make(chan protocol.ProcessMessageParams, 4)
			ops := bustest.Connect(t, srv.URL, "ops", func(p protocol.ProcessMessageParams) any {
				events <- p
				return protocol.ProcessMessageResult{Processed: true}
			})
			ops.Subscribe("system:message.*", "")
			var sub *bustest.Client
			sub = bustest.Connect(t, srv.URL, "sub", tt.answer(&sub))
			sub.Subscribe("jobs:*", "")
			pub := bustest.Connect(t, srv.URL, "pub", nil)
			var r protocol.SendMessageResult
			pub.MustCall("sendMessage", map[string]any{"topic": "jobs:7", "payload": map[string]any{"type": "job", "n": 7}, "meta": map[string]any{"traceparent": "t"}}, &r)
			require.True(t, r.Acks[0].Retrying)

			event := recv(t, events)
			assert.Equal(t, bus.TopicDeadLettered, event.Topic)
			var ev map[string]any
			require.NoError(t, json.Unmarshal(event.Payload, &ev))
			assert.Equal(t, "dead_letter", ev["type"])
			assert.Equal(t, tt.reason, ev["reason"])

			list := dlqList(t, pub, protocol.DLQListParams{})
			require.Len(t, list.Entries, 1)
			d := list.Entries[0]
			assert.Equal(t, ev["id"], d.ID)
			assert.Equal(t, tt.reason, d.Reason)
			assert.Equal(t, r.MessageID, d.MessageID)
			assert.Equal(t, "jobs:7", d.Topic)
			assert.Equal(t, "pub", d.From)
			assert.Equal(t, "sub", d.ClientID)
			assert.Equal(t, "jobs:*", d.Subscription)
			assert.JSONEq(t, `{"type":"job","n":7}`, string(d.Payload))
			assert.JSONEq(t, `{"traceparent":"t"}`, string(d.Meta))
			wantAttempts := 3
			if tt.reason == protocol.ReasonRejected {
				wantAttempts = 2
			}
			require.Len(t, d.Attempts, wantAttempts)
			for _, a := range d.Attempts {
				assert.NotEmpty(t, a.Error)
			}
			assert.Equal(t, d.Attempts[0].At, d.FirstAttempt)
			assert.Equal(t, d.Attempts[wantAttempts-1].At, d.LastAttempt)
			assert.Equal(t, 0, pendingCount(t, srv))
		})
	}
}

func TestHeldUntilSubscriberAppears(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{HoldLifetime: time.Minute})
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("agent:late", "task_request")
	assert.False(t, r.Success)
	assert.True(t, r.Held)
	assert.NotEmpty(t, r.NextAttempt)
	assert.Equal(t, protocol.ReasonNoSubscribers, r.Reason)

	other := pub.Publish("elsewhere:1", "t")
	assert.False(t, other.Held, "only hold patterns hold")

	seen := make(chan protocol.ProcessMessageParams, 1)
	late := bustest.Connect(t, srv.URL, "late", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	late.Subscribe("agent:late", "")
	p := recv(t, seen) // long before the minute's lifetime: the subscription woke it
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.Equal(t, "pub", p.From)
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestHeldWaitsForItsLifetime: a held message is not tried on the retry
// schedule, which would use up its attempts in milliseconds here; it waits
// for its own lifetime, then is dead-lettered.
func TestHeldWaitsForItsLifetime(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	opts := fastRetries(2)
	opts.HoldLifetime = lifetime
	srv := bustest.Start(t, opts)
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	before := time.Now()
	r := pub.Publish("agent:never", "t")
	require.True(t, r.Held)
	next, err := time.Parse(time.RFC3339Nano, r.NextAttempt)
	require.NoError(t, err)
	assert.WithinDuration(t, before.Add(lifetime), next, 100*time.Millisecond, "next_attempt is the end of the lifetime")
	d := onlyDeadLetter(t, pub)
	assert.Equal(t, protocol.ReasonNoSubscribers, d.Reason)
	assert.Empty(t, d.ClientID)
	assert.GreaterOrEqual(t, d.DeadAt.Sub(before), lifetime)
	require.Len(t, d.Attempts, 2, "the publish, and the end of the lifetime")
	assert.Contains(t, d.Attempts[1].Error, "hold lifetime")
}

// TestHeldOutlastsTheRetrySchedule: long after the retry schedule would
// have run out, a held message still reaches the subscriber that appears.
func TestHeldOutlastsTheRetrySchedule(t *testing.T) {
	srv := bustest.Start(t, fastRetries(2))
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("agent:late", "t")
	require.True(t, r.Held)
	// fastRetries(2) would dead-letter it after one 20 ms backoff; held,
	// it is due only when the hold lifetime (an hour) ends.
	var due []time.Time
	require.Eventually(t, func() bool { due = bus.HeldUntil(srv.Server, "agent:late"); return len(due) == 1 },
		bustest.Timeout, 5*time.Millisecond, "the message held")
	assert.Greater(t, time.Until(due[0]), 50*time.Minute, "held until the hold lifetime ends, not on the retry schedule")
	assert.Empty(t, dlqList(t, pub, protocol.DLQListParams{}).Entries)
	seen := make(chan protocol.ProcessMessageParams, 1)
	bustest.Connect(t, srv.URL, "late", attempts(seen, protocol.ProcessMessageResult{Processed: true})).Subscribe("agent:late", "")
	assert.Equal(t, r.MessageID, recv(t, seen).MessageID)
}

// TestHoldLifetimeCountsFromThePublish: the lifetime runs from the first
// routing, which the store keeps, not from the bus's start: a hold
// published two hours ago, stored by a bus with a longer lifetime, is
// dead-lettered as soon as a bus with a one-hour lifetime resumes it.
func TestHoldLifetimeCountsFromThePublish(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	published := time.Now().Add(-2 * time.Hour)
	old := &store.Pending{
		Kind:     store.KindHold,
		Message:  store.Message{ID: "old-1", Topic: "agent:gone", Payload: json.RawMessage(`{"type":"t"}`), PublishedAt: published},
		Attempts: []store.Attempt{{At: published, Error: "no subscribers"}},
		NextAt:   published.Add(24 * time.Hour),
	}
	require.NoError(t, st.PutPending(old))
	fresh := &store.Pending{
		Kind:     store.KindHold,
		Message:  store.Message{ID: "fresh-1", Topic: "agent:soon", Payload: json.RawMessage(`{"type":"t"}`)},
		Attempts: []store.Attempt{{At: time.Now(), Error: "no subscribers"}},
		NextAt:   time.Now().Add(time.Hour),
	}
	require.NoError(t, st.PutPending(fresh))

	srv := bustest.Start(t, &bus.Options{Store: st, HoldLifetime: time.Hour})
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	d := onlyDeadLetter(t, pub)
	assert.Equal(t, "old-1", d.MessageID)
	assert.Equal(t, protocol.ReasonNoSubscribers, d.Reason)
	assert.Equal(t, 1, pendingCount(t, srv), "the hold within its lifetime waits on")
}

// TestRetriesSurviveRestart: pending work committed by one bus is resumed
// by the next one on the same store. On the bubble's clock the retry
// asked for in 5 s cannot fire before the first bus stops, since that
// clock moves only when every goroutine waits (asked for in 0.3 s on the
// wall clock, it fired first on a loaded box and came as attempt 3); the
// second bus makes it due within recv's bound of bustest.Timeout.
func TestRetriesSurviveRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		st, err := store.Open(dir, nil)
		require.NoError(t, err)
		opts := &bus.Options{Store: st, RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour}
		first := bustest.StartInMemory(t, opts)
		sub := bustest.Connect(t, first.URL, "worker", func(protocol.ProcessMessageParams) any {
			return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 5}
		})
		sub.Subscribe("jobs", "")
		pub := bustest.Connect(t, first.URL, "pub", nil)
		retried := pub.Publish("jobs", "t")
		require.True(t, retried.Acks[0].Retrying)
		held := pub.Publish("agent:absent", "t")
		require.True(t, held.Held)
		require.NoError(t, first.Shutdown(t.Context()))
		require.NoError(t, st.Close())

		st, err = store.Open(dir, nil)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		second := bustest.StartInMemory(t, &bus.Options{Store: st, RetryBaseDelay: 20 * time.Millisecond})
		var mu sync.Mutex
		got := map[string]int{}
		done := make(chan struct{}, 2)
		handler := func(p protocol.ProcessMessageParams) any {
			mu.Lock()
			got[p.MessageID] = p.Attempt
			mu.Unlock()
			done <- struct{}{}
			return protocol.ProcessMessageResult{Processed: true}
		}
		bustest.Connect(t, second.URL, "worker", handler).Subscribe("jobs", "")
		bustest.Connect(t, second.URL, "absent", handler).Subscribe("agent:absent", "")
		recv(t, done)
		recv(t, done)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 2, got[retried.MessageID])
		assert.Equal(t, 1, got[held.MessageID])
	})
}
