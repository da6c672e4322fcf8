package spawner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

	awaitAway(t, h, first.AgentID)

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

// awaitAway waits until the bus holds agentID's durable subscription as
// away, with the spawner its waker.
func awaitAway(t *testing.T, h *harness, agentID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var r protocol.SubscriptionsListResult
		if err := h.client.Call(context.Background(), protocol.MethodSubscriptionsList, protocol.SubscriptionsListParams{ClientID: agentID}, &r); err != nil {
			return false
		}
		return len(r.Subscriptions) == 1 && r.Subscriptions[0].Away && r.Subscriptions[0].Waker == "spawner"
	}, wait, 20*time.Millisecond, "the agent's durable subscription away, with the spawner its waker")
}

// exitOnCue is an agent wrapper whose process outlives its agent until the
// test creates "exit" in the workspace, as a loaded machine's slow exit
// does: the bus has seen the agent's connection close, and holds its
// messages, before the spawner reaps it.
const exitOnCue = `trap : TERM
"$1"
until [ -e "$BUB_WORKSPACE/exit" ]; do sleep 0.02; done
`

// TestWakeForAnAgentStillStopping: the wake for a message held for a
// hibernating agent, whose connection has closed but whose process the
// spawner has not reaped yet, starts it once it is reaped; the bus
// does not ask again soon.
func TestWakeForAnAgentStillStopping(t *testing.T) {
	t.Parallel()
	bin, err := echoAgent()
	require.NoError(t, err)
	script := filepath.Join(t.TempDir(), "exit-on-cue.sh")
	require.NoError(t, os.WriteFile(script, []byte(exitOnCue), 0o600))
	h := newHarness(t, spawner.Options{Command: []string{"/bin/sh", script, bin}, IdleTimeout: 300 * time.Millisecond,
		Env: append(os.Environ(), "ECHO_DURABLE=1")}, nil)
	h.send(t, "tg:9", chat("one"))
	first := h.replyWithText(t, "echo: one")
	spawned := h.event(t, spawner.EventSpawned)
	awaitAway(t, h, first.AgentID)

	res := h.send(t, "tg:9", chat("two"))
	require.Len(t, res.Acks, 1, "%+v", res)
	require.True(t, res.Acks[0].Held, "held for the stopping agent: %+v", res.Acks[0])
	require.Eventually(t, func() bool { return strings.Contains(h.log.String(), "waking it once it has exited") }, wait, 10*time.Millisecond,
		"the spawner never took the wake for its stopping agent; its log:\n%s", h.log)
	require.NoError(t, os.WriteFile(filepath.Join(spawned.Workspace, "exit"), nil, 0o600))

	woken := h.event(t, spawner.EventWoken)
	require.Equal(t, first.AgentID, woken.AgentID)
	require.Equal(t, spawner.ReasonMessage, woken.Reason)
	require.Equal(t, first.AgentID, h.replyWithText(t, "echo: two").AgentID)
}
