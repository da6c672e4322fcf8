package bus_test

import (
	"encoding/json"
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
