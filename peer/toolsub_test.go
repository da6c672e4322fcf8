package peer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// TestToolSubscriptionHelpers: the callback URL is the bus's own HTTP
// address; an event reaches the agent by URL and by topic; a refusal
// reads as CallbackError with its status and wait, and a gone
// subscription as ErrSubscriptionGone, by either way.
func TestToolSubscriptionHelpers(t *testing.T) {
	st := store.OpenMemory()
	b := startBus(t, &bus.Options{Store: st, Extensions: []bus.Extension{toolsub.New(&toolsub.Options{Store: st, EventRate: 0.01, EventBurst: 2})}})
	ctx := context.Background()
	got := make(chan *peer.Delivery, 8)
	agent := dial(t, b.URL, "agent-1", nil)
	require.NoError(t, agent.Subscribe(ctx, "agent:agent-1", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		got <- d
		return peer.Result{Processed: true}, nil
	}, nil))
	sub, err := agent.StartToolSubscription(ctx, "tg:1", "call-1", nil)
	require.NoError(t, err)
	assert.Equal(t, "agent:agent-1", sub.Topic, "the default topic")
	assert.True(t, strings.HasPrefix(sub.CallbackURL, "http://"+strings.TrimSuffix(strings.TrimPrefix(b.URL, "ws://"), "/")+"/v1/callbacks/"), sub.CallbackURL)

	ev := protocol.SubscriptionEvent{GroupID: "tg:1", ToolCallID: "call-1", Text: "by URL"}
	require.NoError(t, peer.PostSubscriptionEvent(ctx, nil, sub.CallbackURL, ev))
	tool := dial(t, b.URL, "tool", nil)
	ev.Text = "by topic"
	require.NoError(t, tool.SendSubscriptionEvent(ctx, sub.CallbackTopic, ev))
	// Both, in either order: the SDK runs handlers concurrently, so two
	// deliveries the bus wrote in order may reach got the other way.
	var texts []string
	for range 2 {
		select {
		case d := <-got:
			e, ok := d.SubscriptionEvent()
			require.True(t, ok, "%s", d.Payload)
			texts = append(texts, e.Text)
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %q; want %q and %q", texts, "by URL", "by topic")
		}
	}
	assert.ElementsMatch(t, []string{"by URL", "by topic"}, texts)

	err = peer.PostSubscriptionEvent(ctx, nil, sub.CallbackURL, ev)
	var cerr *peer.CallbackError
	require.True(t, errors.As(err, &cerr), "%v", err)
	assert.Equal(t, 429, cerr.Status)
	assert.Greater(t, cerr.RetryAfter, time.Duration(0))
	bad := ev
	bad.GroupID = "tg:2"
	err = peer.PostSubscriptionEvent(ctx, nil, sub.CallbackURL, bad)
	require.True(t, errors.As(err, &cerr), "%v", err)
	assert.Equal(t, 400, cerr.Status)
	assert.Contains(t, cerr.Message, "group_id")

	_, err = agent.CancelToolSubscription(ctx, "tg:1", "call-1")
	require.NoError(t, err)
	assert.ErrorIs(t, peer.PostSubscriptionEvent(ctx, nil, sub.CallbackURL, ev), peer.ErrSubscriptionGone)
	assert.ErrorIs(t, tool.SendSubscriptionEvent(ctx, sub.CallbackTopic, ev), peer.ErrSubscriptionGone)
	err = peer.PostSubscriptionEvent(ctx, nil, "http://127.0.0.1:1/v1/callbacks/secret-id", ev)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "secret-id", "a transport error shows the callback id")
}
