package peer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/peer"
)

func TestFromEnv(t *testing.T) {
	t.Setenv("BUB_BUS_URL", "")
	t.Setenv("BUB_AGENT_ID", "agent-1")
	t.Setenv("BUB_DEFAULT_TOPIC", "tg:1")
	t.Setenv("BUB_WORKSPACE", "/ws")
	assert.Equal(t, peer.Env{BusURL: peer.DefaultBusURL, AgentID: "agent-1", DefaultTopic: "tg:1", Workspace: "/ws"}, peer.FromEnv())
}

// agentEnv starts a bus, sets the agent environment for agentID with
// default topic outbound:42, and returns a chat bridge peer with the
// replies it receives on outbound:*.
func agentEnv(t *testing.T, agentID string) (*peer.Conn, <-chan *peer.Delivery) {
	t.Helper()
	b := startBus(t, nil)
	t.Setenv("BUB_BUS_URL", b.URL)
	t.Setenv("BUB_AGENT_ID", agentID)
	t.Setenv("BUB_DEFAULT_TOPIC", "outbound:42")
	chat := dial(t, b.URL, "bridge", nil)
	replies := make(chan *peer.Delivery, 1)
	require.NoError(t, chat.Subscribe(t.Context(), "outbound:*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		replies <- d
		return peer.Result{Processed: true}, nil
	}, nil))
	return chat, replies
}

// replyOnDefaultTopic is an agent's handler: it answers on its default
// topic, through the delivery's Conn.
func replyOnDefaultTopic(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	if _, err := d.Conn.SendMessage(ctx, "", map[string]string{"type": "plaintext_message", "text": "on it"}, nil); err != nil {
		return peer.Result{}, err
	}
	return peer.Result{Processed: true, Message: "accepted"}, nil
}

// An agent started by the spawner dials from its environment, receives its
// direct messages, and replies to its default topic.
func TestDialEnv(t *testing.T) {
	chat, replies := agentEnv(t, "agent-abc")
	agent, err := peer.DialEnv(t.Context(), replyOnDefaultTopic, &peer.Options{Logger: quiet})
	require.NoError(t, err)
	defer agent.Close()
	assert.Equal(t, "agent-abc", agent.ClientID())

	r, err := chat.SendMessage(t.Context(), peer.AgentTopic("agent-abc"), msg("task_request"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.Equal(t, "agent-abc", r.Acks[0].ClientID)
	assert.Equal(t, "accepted", r.Acks[0].Message)
	reply := <-replies
	assert.Equal(t, "outbound:42", reply.Topic)
	assert.Equal(t, "agent-abc", reply.From)
}

// A message the bus held for an agent arrives the moment DialEnv
// subscribes, before DialEnv returns; the handler replies through
// d.Conn.
func TestDialEnvHeldMessage(t *testing.T) {
	chat, replies := agentEnv(t, "late")
	r, err := chat.SendMessage(t.Context(), peer.AgentTopic("late"), msg("task_request"), nil)
	require.NoError(t, err)
	require.True(t, r.Held)
	assert.False(t, r.NoSubscribers(), "held, so kept for a subscriber")

	agent, err := peer.DialEnv(t.Context(), replyOnDefaultTopic, &peer.Options{Logger: quiet})
	require.NoError(t, err)
	defer agent.Close()
	assert.Equal(t, "late", (<-replies).From)
}

func TestDialEnvNeedsAgentID(t *testing.T) {
	t.Setenv("BUB_AGENT_ID", "")
	_, err := peer.DialEnv(t.Context(), nil, nil)
	require.ErrorContains(t, err, "BUB_AGENT_ID")
}
