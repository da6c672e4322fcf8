package bus_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// sendRaw publishes payload and meta as given and returns the result.
func sendRaw(t *testing.T, c *bustest.Client, topic, payload, meta string) protocol.SendMessageResult {
	t.Helper()
	var r protocol.SendMessageResult
	c.MustCall(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": json.RawMessage(payload), "meta": json.RawMessage(meta)}, &r)
	return r
}

// TestHeldPayloadsComeBackFromTheStore: the scheduler keeps only the
// schedule of held and retried messages; their payloads and meta are
// read back from the store when they are due, across a restart too, and
// reach the subscriber as published.
func TestHeldPayloadsComeBackFromTheStore(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	first := bustest.Start(t, &bus.Options{Store: st})
	pub := bustest.Connect(t, first.URL, "pub", nil)
	payloads := map[string]string{}
	var order []string
	for i, topic := range []string{"agent:x", "agent:y", "agent:x"} {
		payload := fmt.Sprintf(`{"z":%d,"type":"t","a":"é","n":[1.50,{"k":null}]}`, i)
		r := sendRaw(t, pub, topic, payload, fmt.Sprintf(`{"trace":"t%d"}`, i))
		require.True(t, r.Held)
		payloads[r.MessageID] = payload
		order = append(order, r.MessageID)
	}
	require.NoError(t, first.Shutdown(t.Context()))
	require.NoError(t, st.Close())

	st, err = store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	second := bustest.Start(t, &bus.Options{Store: st})
	seen := make(chan protocol.ProcessMessageParams, 3)
	x := bustest.Connect(t, second.URL, "x", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	x.Subscribe("agent:x", "")
	got := map[string]protocol.ProcessMessageParams{}
	for range 2 {
		p := recv(t, seen)
		got[p.MessageID] = p
	}
	require.Eventually(t, func() bool { return pendingCount(t, second) == 1 }, bustest.Timeout, 10*time.Millisecond,
		"agent:y is still held")
	y := bustest.Connect(t, second.URL, "y", attempts(seen, protocol.ProcessMessageResult{Processed: true}))
	y.Subscribe("agent:?", "")
	p := recv(t, seen)
	got[p.MessageID] = p

	require.Len(t, got, 3)
	for i, id := range order {
		assert.Equal(t, payloads[id], string(got[id].Payload), "message %d", i)
		assert.JSONEq(t, fmt.Sprintf(`{"trace":"t%d"}`, i), string(got[id].Meta), "message %d", i)
	}
	require.Eventually(t, func() bool { return pendingCount(t, second) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestRetriedPayloadComesBackFromTheStore: a retry's later attempts carry
// the payload and meta the store kept, not the scheduler.
func TestRetriedPayloadComesBackFromTheStore(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	opts := fastRetries(3)
	opts.Store = st
	srv := bustest.Start(t, opts)
	seen := make(chan protocol.ProcessMessageParams, 3)
	bustest.Connect(t, srv.URL, "worker", attempts(seen,
		protocol.ProcessMessageResult{ShouldRetry: true},
		protocol.ProcessMessageResult{Processed: true})).Subscribe("jobs", "")
	const payload, meta = `{"z":1,"type":"job","a":[{"b":2.50}]}`, `{"trace":"abc"}`
	r := sendRaw(t, bustest.Connect(t, srv.URL, "pub", nil), "jobs", payload, meta)
	require.True(t, r.Acks[0].Retrying)
	for attempt := 1; attempt <= 2; attempt++ {
		p := recv(t, seen)
		assert.Equal(t, attempt, p.Attempt)
		assert.Equal(t, payload, string(p.Payload), "attempt %d", attempt)
		assert.JSONEq(t, meta, string(p.Meta), "attempt %d", attempt)
	}
	require.Eventually(t, func() bool { return pendingCount(t, srv) == 0 }, bustest.Timeout, 10*time.Millisecond)
}

// TestNotSentRoutedAgain: a delivery never written, because its
// subscriber's connection closed after the message was routed to it
// (rpcstream.ErrNotSent), is settled as not_sent: the client that left
// gets no retry, since it never saw the message; the message is held
// again, for whichever subscriber comes, and routed to the next one.
func TestNotSentRoutedAgain(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour})
	leaver := bustest.Dial(t, srv.URL)
	leaver.Initialize("leaver")
	leaver.Subscribe("jobs", "")
	// Subscribed last, with a pattern of its own, so first in the chain
	// (last match wins): the walk waits for its answer before it goes on
	// to leaver.
	reached, release := make(chan struct{}, 1), make(chan struct{})
	first := bustest.Connect(t, srv.URL, "first", func(protocol.ProcessMessageParams) any {
		reached <- struct{}{}
		<-release
		return protocol.ProcessMessageResult{Processed: false}
	})
	first.Subscribe("job*", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	pub.Send(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"jobs","payload":{"type":"job"}}}`)
	select {
	case <-reached:
	case <-time.After(bustest.Timeout):
		t.Fatal("the first subscriber got no delivery")
	}

	// leaver goes while the walk waits, and first unsubscribes: nobody
	// subscribes when the walk reaches leaver's closed connection.
	require.NoError(t, leaver.WS.Close(websocket.StatusNormalClosure, "bye"))
	require.Eventually(t, func() bool { return bus.ClientConn(srv.Server, "leaver") == nil }, bustest.Timeout, time.Millisecond)
	first.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "job*"}, nil)
	close(release)

	var answer protocol.SendMessageResult
	pub.RecvResult(&answer)
	acks := answer.Acks
	require.Len(t, acks, 2)
	assert.Equal(t, protocol.Ack{ClientID: "first", Subscription: "job*"}, acks[0])
	assert.Equal(t, "leaver", acks[1].ClientID)
	assert.Contains(t, acks[1].Error, "not_sent: the subscriber's connection was closing")
	assert.True(t, acks[1].Retrying, "held again")
	assert.Equal(t, 2, acks[1].Attempt, "the next routing is the message's second")
	assert.Equal(t, 1.0, metric(t, srv, "bub_deliveries_total", "not_sent"))

	pending, err := srv.Store.Pending()
	require.NoError(t, err)
	require.Len(t, pending, 1, "one hold, and no retry for the client that left")
	assert.Equal(t, store.KindHold, pending[0].Kind)
	assert.Empty(t, pending[0].ClientID, "held for any subscriber")
	assert.Empty(t, pending[0].AskedBy)

	// Another client subscribes: the hold is routed to it at once, though
	// its wait (RetryBaseDelay) is an hour.
	got := make(chan protocol.ProcessMessageParams, 1)
	bustest.Connect(t, srv.URL, "taker", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("jobs", "")
	select {
	case p := <-got:
		assert.Equal(t, answer.MessageID, p.MessageID)
	case <-time.After(bustest.Timeout):
		t.Fatal("the message held again was not routed to the new subscriber")
	}
	require.Eventually(t, func() bool {
		pending, err := srv.Store.Pending()
		return err == nil && len(pending) == 0
	}, bustest.Timeout, time.Millisecond, "the hold is done once taken")
}
