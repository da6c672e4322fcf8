package spawner_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// TestWakeForDurableSubscription: an agent that subscribes its
// conversation durably and is hibernated has the conversation's next
// message held for it by the bus, not handed to the spawner's fallback;
// the spawner, its waker, is told and starts it again with the same id,
// and the agent is delivered the held message once.
func TestWakeForDurableSubscription(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{IdleTimeout: 300 * time.Millisecond, Env: append(os.Environ(), "ECHO_DURABLE=1")}, nil)
	h.send(t, "tg:7", chat("one"))
	first := h.replyWithText(t, "echo: one")
	hibernated := h.event(t, spawner.EventHibernated)
	require.Equal(t, first.AgentID, hibernated.AgentID)

	// Once the bus holds the agent's subscription as away.
	require.Eventually(t, func() bool {
		var r protocol.SubscriptionsListResult
		if err := h.client.Call(context.Background(), protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: first.AgentID}, &r); err != nil {
			return false
		}
		return len(r.Subscriptions) == 1 && r.Subscriptions[0].Away && r.Subscriptions[0].Waker == "spawner"
	}, wait, 20*time.Millisecond, "the agent's durable subscription away, with the spawner its waker")

	res := h.send(t, "tg:7", chat("two"))
	require.Len(t, res.Acks, 1, "%+v", res)
	require.True(t, res.Acks[0].Held, "held for the hibernated agent: %+v", res.Acks[0])
	require.Equal(t, first.AgentID, res.Acks[0].ClientID)

	woken := h.event(t, spawner.EventWoken)
	require.Equal(t, first.AgentID, woken.AgentID)
	require.Equal(t, spawner.ReasonMessage, woken.Reason)
	again := h.replyWithText(t, "echo: two")
	require.Equal(t, first.AgentID, again.AgentID)
	select {
	case r := <-h.replies:
		t.Fatalf("a second reply: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
}
