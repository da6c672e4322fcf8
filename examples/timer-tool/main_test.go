package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// TestTimerTool runs the tool against a real bus: an agent subscribes
// with SubscribeTool and gets each tick as an event on its own topic,
// the last one final; a second timer with no end is cancelled, the tool
// hears cancel_tool_call and forgets it.
func TestTimerTool(t *testing.T) {
	b := bustest.StartExtended(t, nil, func(st *store.Store) []bus.Extension {
		return []bus.Extension{toolsub.New(&toolsub.Options{Store: st})}
	})
	state := filepath.Join(t.TempDir(), "timers.json")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, slog.New(slog.DiscardHandler), b.URL, "tool:timer", state) }()
	t.Cleanup(func() {
		stop()
		<-done
	})

	agent, events := bustest.Collect(t, b.URL, "agent-1", "agent:agent-1")
	var sub *peer.ToolSubscription
	require.Eventually(t, func() bool {
		var err error
		sub, err = agent.SubscribeTool(ctx, "tool:timer", "tg:1", "call-1", map[string]any{"every": "100ms", "count": 3}, nil)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the tool to take the call")
	assert.True(t, sub.Result.Subscription)
	assert.Contains(t, sub.Result.Text, "Subscription ID: call-1")
	for i := 1; i <= 3; i++ {
		select {
		case d := <-events:
			ev, ok := d.SubscriptionEvent()
			require.True(t, ok, "%s", d.Payload)
			assert.Equal(t, protocol.SubscriptionEvent{Type: "subscription_event", GroupID: "tg:1", ToolCallID: "call-1", Text: `{"tick":` + string(rune('0'+i)) + `}`, Final: i == 3}, *ev)
		case <-time.After(bustest.Timeout):
			t.Fatalf("tick %d never came", i)
		}
	}
	list, err := agent.ToolSubscriptions(ctx, "tg:1")
	require.NoError(t, err)
	assert.Empty(t, list, "the final event ended the subscription")

	_, err = agent.SubscribeTool(ctx, "tool:timer", "tg:1", "call-2", map[string]any{"every": "100ms"}, nil)
	require.NoError(t, err)
	<-events
	res, err := agent.CancelToolSubscription(ctx, "tg:1", "call-2")
	require.NoError(t, err)
	assert.True(t, res.Notified)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(state)
		return err == nil && string(b) == "[]"
	}, 10*time.Second, 20*time.Millisecond, "the tool to forget the cancelled timer")

	_, err = agent.SubscribeTool(ctx, "tool:timer", "tg:1", "call-3", map[string]any{"every": "1ms"}, nil)
	assert.ErrorContains(t, err, "every: at least 100ms")
	list, err = agent.ToolSubscriptions(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, list, "a call the tool refused leaves no subscription")
}
