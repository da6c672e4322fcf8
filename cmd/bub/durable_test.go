package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// listDurable lists the durable subscriptions with the real bub binary.
func listDurable(t *testing.T, d *daemon) protocol.SubscriptionsListResult {
	t.Helper()
	out, stderr, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "subscriptions", "list", "--json")
	require.Equal(t, 0, code, "bub subscriptions list: %s", stderr)
	var r protocol.SubscriptionsListResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// TestDurableHeldAcrossKill: a message held for an away durable
// subscriber survives SIGKILL of bub serve, and is delivered to the
// owner exactly once when it reconnects to the restarted bus; bub
// subscriptions lists and removes the subscription.
func TestDurableHeldAcrossKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startBus(t, dir, "--log-level", "warn")
	owner := bustest.Connect(t, d.url, "owner", bustest.Processed)
	owner.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "feed:*", Durable: true}, nil)
	require.NoError(t, owner.WS.CloseNow())
	require.Eventually(t, func() bool {
		r := listDurable(t, d)
		return len(r.Subscriptions) == 1 && r.Subscriptions[0].Away
	}, bustest.Timeout, 20*time.Millisecond, "the owner away")

	pub := bustest.Connect(t, d.url, "pub", nil)
	res := pub.Publish("feed:news", "story")
	require.Len(t, res.Acks, 1, "%+v", res)
	require.True(t, res.Acks[0].Held, "%+v", res.Acks[0])
	d.kill() // SIGKILL

	d = startBus(t, dir, "--log-level", "warn")
	r := listDurable(t, d)
	require.Len(t, r.Subscriptions, 1)
	require.Equal(t, "owner", r.Subscriptions[0].ClientID)
	require.True(t, r.Subscriptions[0].Away)
	require.Equal(t, 1, r.Subscriptions[0].Held)

	seen := make(chan protocol.ProcessMessageParams, 4)
	back := bustest.Connect(t, d.url, "owner", func(p protocol.ProcessMessageParams) any {
		seen <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	back.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "feed:*", Durable: true}, nil)
	select {
	case p := <-seen:
		require.Equal(t, res.MessageID, p.MessageID)
		require.Equal(t, "feed:news", p.Topic)
	case <-time.After(bustest.Timeout):
		t.Fatal("the held message was not delivered after the restart")
	}
	require.Eventually(t, func() bool {
		r := listDurable(t, d)
		return len(r.Subscriptions) == 1 && !r.Subscriptions[0].Away && r.Subscriptions[0].Held == 0
	}, bustest.Timeout, 20*time.Millisecond, "the owner connected, nothing held")
	// Delivered once: a publish after it is the next delivery.
	pub = bustest.Connect(t, d.url, "pub", nil)
	next := pub.Publish("feed:news", "next")
	require.True(t, next.Acks[0].Processed, "%+v", next.Acks[0])
	require.Equal(t, next.MessageID, (<-seen).MessageID)

	_, stderr, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "subscriptions", "remove", "owner", "feed:*")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, listDurable(t, d).Subscriptions)
	_, stderr, code = bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "subscriptions", "remove", "owner", "feed:*")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "holds no durable subscription")
}
