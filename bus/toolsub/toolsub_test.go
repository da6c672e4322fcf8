package toolsub_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/protocol"
)

// startToolSub records a tool subscription as c and returns its
// callback.
func startToolSub(t *testing.T, c *bustest.Client, groupID, toolCallID, topic, tool string) protocol.ToolSubscriptionStartResult {
	t.Helper()
	var r protocol.ToolSubscriptionStartResult
	c.MustCall(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: groupID, ToolCallID: toolCallID, Topic: topic, Tool: tool}, &r)
	require.True(t, strings.HasPrefix(r.CallbackPath, "/v1/callbacks/"), r.CallbackPath)
	require.Equal(t, "callback:"+strings.TrimPrefix(r.CallbackPath, "/v1/callbacks/"), r.CallbackTopic)
	return r
}

// event is a subscription_event's body.
func event(groupID, toolCallID, text string, final bool) string {
	b, _ := json.Marshal(protocol.SubscriptionEvent{Type: "subscription_event", GroupID: groupID, ToolCallID: toolCallID, Text: text, Final: final})
	return string(b)
}

// recvEvent waits for a delivery on ch and returns its event.
func recvEvent(t *testing.T, ch <-chan protocol.ProcessMessageParams) protocol.ProcessMessageParams {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(bustest.Timeout):
		t.Fatal("no event delivered")
		return protocol.ProcessMessageParams{}
	}
}

// agentOn connects clientID subscribed to topic and returns what it gets.
func agentOn(t *testing.T, srv *bustest.Server, clientID, topic string) (*bustest.Client, <-chan protocol.ProcessMessageParams) {
	t.Helper()
	got := make(chan protocol.ProcessMessageParams, 16)
	c := bustest.Connect(t, srv.URL, clientID, func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	c.Subscribe(topic, "")
	return c, got
}

// TestToolSubscriptionEvents: an event posted to the callback URL, and
// one sent by a bus peer to the callback topic, reach the subscription's
// topic as subscription_event messages from the agent; a final event is
// delivered and ends the subscription, and nothing after it is.
func TestToolSubscriptionEvents(t *testing.T) {
	srv := start(t, nil, toolsub.Options{})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")

	a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", `{"tick":1}`, false), nil)
	require.Equal(t, 200, a.status, string(a.body))
	assert.Contains(t, string(a.body), `"status":"delivered"`)
	p := recvEvent(t, got)
	assert.Equal(t, "tg:1", p.Topic)
	assert.Equal(t, "agent-1", p.From)
	var ev protocol.SubscriptionEvent
	require.NoError(t, json.Unmarshal(p.Payload, &ev))
	assert.Equal(t, protocol.SubscriptionEvent{Type: "subscription_event", GroupID: "tg:1", ToolCallID: "call-1", Text: `{"tick":1}`}, ev)

	tool := bustest.Connect(t, srv.URL, "timer-tool", bustest.Processed)
	var res protocol.SendMessageResult
	tool.MustCall(protocol.MethodSendMessage, map[string]any{"topic": cb.CallbackTopic, "payload": json.RawMessage(event("tg:1", "call-1", "2", false))}, &res)
	assert.True(t, res.Success, "%+v", res)
	p = recvEvent(t, got)
	require.NoError(t, json.Unmarshal(p.Payload, &ev))
	assert.Equal(t, "2", ev.Text)

	a = do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "last", true), nil)
	require.Equal(t, 200, a.status, string(a.body))
	p = recvEvent(t, got)
	require.NoError(t, json.Unmarshal(p.Payload, &ev))
	assert.True(t, ev.Final)
	var list protocol.ToolSubscriptionListResult
	agent.MustCall(protocol.MethodToolSubscriptionList, map[string]any{}, &list)
	assert.Empty(t, list.Subscriptions, "the final event was delivered before its subscription ended")

	before := bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "unknown")
	a = do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "after", false), nil)
	assert.Equal(t, 404, a.status, string(a.body))
	assert.Equal(t, int64(protocol.CodeNotFound), a.errorCode())
	r := tool.Call(protocol.MethodSendMessage, map[string]any{"topic": cb.CallbackTopic, "payload": json.RawMessage(event("tg:1", "call-1", "after", false))})
	require.NotNil(t, r.Error)
	assert.Equal(t, int64(protocol.CodeNotFound), r.Error.Code)
	assert.Equal(t, before+2, bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "unknown"))
	select {
	case p := <-got:
		t.Fatalf("an event after the final one was delivered: %s", p.Payload)
	case <-time.After(200 * time.Millisecond):
	}
	agent.MustCall(protocol.MethodToolSubscriptionList, map[string]any{}, &list)
	assert.Empty(t, list.Subscriptions)
	assert.Equal(t, float64(3), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "delivered"))
}

// TestToolSubscriptionBadEvents: an unknown callback is 404, a malformed
// event 400 naming the field, another method 405; each is counted and
// nothing is delivered.
func TestToolSubscriptionBadEvents(t *testing.T) {
	srv := start(t, nil, toolsub.Options{})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	tests := []struct {
		name, path, body string
		status           int
		want             string // in the error message
	}{
		{"unknown callback", "/v1/callbacks/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", event("tg:1", "call-1", "x", false), 404, "no active tool subscription"},
		{"no id", "/v1/callbacks/", event("tg:1", "call-1", "x", false), 404, "no such callback"},
		{"not JSON", cb.CallbackPath, `{"type":`, 400, "not valid JSON"},
		{"not an object", cb.CallbackPath, `["subscription_event"]`, 400, "JSON object"},
		{"no type", cb.CallbackPath, `{"group_id":"tg:1","tool_call_id":"call-1","text":"x"}`, 400, "type is required"},
		{"wrong type", cb.CallbackPath, `{"type":"tool_result","group_id":"tg:1","tool_call_id":"call-1","text":"x"}`, 400, `type must be "subscription_event"`},
		{"group_id a number", cb.CallbackPath, `{"type":"subscription_event","group_id":1,"tool_call_id":"call-1","text":"x"}`, 400, "group_id must be a string"},
		{"empty tool_call_id", cb.CallbackPath, `{"type":"subscription_event","group_id":"tg:1","tool_call_id":"","text":"x"}`, 400, "tool_call_id must not be empty"},
		{"no text", cb.CallbackPath, `{"type":"subscription_event","group_id":"tg:1","tool_call_id":"call-1"}`, 400, "text is required"},
		{"final a string", cb.CallbackPath, `{"type":"subscription_event","group_id":"tg:1","tool_call_id":"call-1","text":"x","final":"yes"}`, 400, "final must be a boolean"},
		{"associative null", cb.CallbackPath, `{"type":"subscription_event","group_id":"tg:1","tool_call_id":"call-1","text":"x","associative":null}`, 400, "associative must be a boolean"},
		{"another thread", cb.CallbackPath, event("tg:2", "call-1", "x", false), 400, `group_id "tg:2" is not the thread`},
		{"another tool call", cb.CallbackPath, event("tg:1", "call-2", "x", false), 400, `tool_call_id "call-2" is not the tool call`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, srv, "POST", tt.path, tt.body, nil)
			assert.Equal(t, tt.status, a.status, string(a.body))
			assert.Contains(t, errorMessage(a), tt.want)
		})
	}
	a := do(t, srv, "GET", cb.CallbackPath, "", nil)
	assert.Equal(t, 405, a.status)
	assert.Equal(t, "POST", a.header.Get("Allow"))
	a = do(t, srv, "POST", cb.CallbackPath, `{"text":"`+strings.Repeat("a", 1<<20)+`"}`, nil)
	assert.Equal(t, 413, a.status)
	assert.Equal(t, float64(2), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "unknown"))
	assert.Equal(t, float64(9), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "malformed"))
	assert.Equal(t, float64(2), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "mismatch"))
	select {
	case p := <-got:
		t.Fatalf("a bad event was delivered: %s", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
	// The subscription is still active, and the HTTP API for messages
	// does not take events.
	a = do(t, srv, "POST", "/v1/messages", `{"topic":"`+cb.CallbackTopic+`","payload":`+event("tg:1", "call-1", "x", false)+`}`, nil)
	assert.Equal(t, 400, a.status, string(a.body))
	assert.Contains(t, errorMessage(a), "/v1/callbacks/")
	a = do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "x", false), nil)
	assert.Equal(t, 200, a.status, string(a.body))
	recvEvent(t, got)
}

// TestToolSubscriptionCancel: cancel is synchronous, sends
// cancel_tool_call to the tool's topic, and the callback is 404 after
// it; only the owner may cancel, and a second cancel finds nothing.
func TestToolSubscriptionCancel(t *testing.T) {
	srv := start(t, nil, toolsub.Options{})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	_, notices := agentOn(t, srv, "timer-tool", "tool:timer")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "tool:timer")

	other := bustest.Connect(t, srv.URL, "agent-2", bustest.Processed)
	r := other.Call(protocol.MethodToolSubscriptionCancel, protocol.ToolSubscriptionCancelParams{GroupID: "tg:1", ToolCallID: "call-1"})
	require.NotNil(t, r.Error)
	assert.Equal(t, int64(protocol.CodeForbidden), r.Error.Code, r.Error.Message)
	var list protocol.ToolSubscriptionListResult
	other.MustCall(protocol.MethodToolSubscriptionList, map[string]any{"group_id": "tg:1"}, &list)
	assert.Empty(t, list.Subscriptions, "another client sees no subscription of agent-1's")
	agent.MustCall(protocol.MethodToolSubscriptionList, map[string]any{"group_id": "tg:1"}, &list)
	require.Len(t, list.Subscriptions, 1)
	assert.Equal(t, protocol.ToolSubscription{GroupID: "tg:1", ToolCallID: "call-1", Topic: "tg:1", Tool: "tool:timer", Owner: "agent-1", Created: list.Subscriptions[0].Created}, list.Subscriptions[0])

	var res protocol.ToolSubscriptionCancelResult
	agent.MustCall(protocol.MethodToolSubscriptionCancel, protocol.ToolSubscriptionCancelParams{GroupID: "tg:1", ToolCallID: "call-1"}, &res)
	assert.Equal(t, protocol.ToolSubscriptionCancelResult{Cancelled: true, Notified: true}, res)
	// Synchronous: the callback is gone the moment cancel answers.
	a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "x", false), nil)
	assert.Equal(t, 404, a.status, string(a.body))
	n := recvEvent(t, notices)
	assert.Equal(t, "agent-1", n.From)
	assert.JSONEq(t, `{"type":"cancel_tool_call","tool_call_id":"call-1","thread_id":"tg:1"}`, string(n.Payload))

	r = agent.Call(protocol.MethodToolSubscriptionCancel, protocol.ToolSubscriptionCancelParams{GroupID: "tg:1", ToolCallID: "call-1"})
	require.NotNil(t, r.Error)
	assert.Equal(t, int64(protocol.CodeNotFound), r.Error.Code)
	assert.Contains(t, r.Error.Message, `thread "tg:1" has no active subscription of tool call "call-1"`)
	select {
	case p := <-got:
		t.Fatalf("an event after the cancel was delivered: %s", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestToolSubscriptionStartRules: start's params and limits, in a table.
func TestToolSubscriptionStartRules(t *testing.T) {
	srv := start(t, nil, toolsub.Options{MaxPerThread: 2})
	agent := bustest.Connect(t, srv.URL, "agent-1", bustest.Processed)
	startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	tests := []struct {
		name   string
		params protocol.ToolSubscriptionStartParams
		code   int64
		want   string
	}{
		{"no group_id", protocol.ToolSubscriptionStartParams{ToolCallID: "c", Topic: "tg:1"}, protocol.CodeInvalidParams, "group_id is required"},
		{"no tool_call_id", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", Topic: "tg:1"}, protocol.CodeInvalidParams, "tool_call_id is required"},
		{"no topic", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "c"}, protocol.CodeInvalidParams, "topic:"},
		{"a callback topic", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "c", Topic: "callback:x"}, protocol.CodeInvalidParams, "is a callback topic"},
		{"a bus topic", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "c", Topic: "system:client.x"}, protocol.CodeForbidden, "bus's own topics"},
		{"a bad tool topic", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "c", Topic: "tg:1", Tool: "a b"}, protocol.CodeInvalidParams, "tool:"},
		{"a long group_id", protocol.ToolSubscriptionStartParams{GroupID: strings.Repeat("g", 257), ToolCallID: "c", Topic: "tg:1"}, protocol.CodeInvalidParams, "group_id is longer than 256 bytes"},
		{"twice", protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "call-1", Topic: "tg:1"}, protocol.CodeInvalidParams, "already has an active subscription"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := agent.Call(protocol.MethodToolSubscriptionStart, tt.params)
			require.NotNil(t, r.Error)
			assert.Equal(t, tt.code, r.Error.Code, r.Error.Message)
			assert.Contains(t, r.Error.Message, tt.want)
		})
	}
	startToolSub(t, agent, "tg:1", "call-2", "tg:1", "")
	r := agent.Call(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "tg:1", ToolCallID: "call-3", Topic: "tg:1"})
	require.NotNil(t, r.Error)
	assert.Equal(t, int64(protocol.CodeLimitReached), r.Error.Code)
	assert.Contains(t, r.Error.Message, "--max-tool-subscriptions-per-thread")
	// Another thread has its own count.
	startToolSub(t, agent, "tg:2", "call-3", "tg:2", "")
	assert.Equal(t, float64(3), bustest.Metric(t, srv.Registry(), "bub_tool_subscriptions", ""))
}

// TestToolSubscriptionRateLimited: events beyond the subscription's rate
// are 429 with Retry-After, counted, and not delivered; other
// subscriptions have their own bucket.
func TestToolSubscriptionRateLimited(t *testing.T) {
	srv := start(t, nil, toolsub.Options{EventRate: 0.01, EventBurst: 2})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	cb2 := startToolSub(t, agent, "tg:1", "call-2", "tg:1", "")
	for i := range 2 {
		a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "x", false), nil)
		require.Equal(t, 200, a.status, "event %d: %s", i, a.body)
		recvEvent(t, got)
	}
	a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "x", false), nil)
	assert.Equal(t, 429, a.status, string(a.body))
	assert.Equal(t, int64(protocol.CodeRateLimited), a.errorCode())
	assert.NotEmpty(t, a.header.Get("Retry-After"))
	assert.Equal(t, float64(1), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "rate_limited"))
	a = do(t, srv, "POST", cb2.CallbackPath, event("tg:1", "call-2", "x", false), nil)
	assert.Equal(t, 200, a.status, string(a.body))
	recvEvent(t, got)
}

// TestToolSubscriptionOrphaned: an event whose thread's topic has nobody
// to take it (its agent gone, no spawner, not a held topic) is answered
// 200 "orphaned", logged, counted and discarded; the subscription stays,
// and a held topic keeps its event instead.
func TestToolSubscriptionOrphaned(t *testing.T) {
	srv := start(t, nil, toolsub.Options{})
	agent := bustest.Connect(t, srv.URL, "agent-1", bustest.Processed)
	cb := startToolSub(t, agent, "tg:gone", "call-1", "tg:gone", "")
	a := do(t, srv, "POST", cb.CallbackPath, event("tg:gone", "call-1", "x", false), nil)
	require.Equal(t, 200, a.status, string(a.body))
	assert.JSONEq(t, `{"status":"orphaned"}`, string(a.body))
	assert.Equal(t, float64(1), bustest.Metric(t, srv.Registry(), "bub_tool_events_total", "orphaned"))
	a = do(t, srv, "POST", cb.CallbackPath, event("tg:gone", "call-1", "y", false), nil)
	assert.Equal(t, 200, a.status, "the subscription outlives its orphaned events")

	held := startToolSub(t, agent, "tg:gone", "call-2", "agent:agent-1", "")
	a = do(t, srv, "POST", held.CallbackPath, event("tg:gone", "call-2", "kept", false), nil)
	require.Equal(t, 200, a.status, string(a.body))
	assert.Contains(t, string(a.body), `"status":"delivered"`)
	_, got := agentOn(t, srv, "agent-1b", "agent:agent-1")
	p := recvEvent(t, got)
	assert.Contains(t, string(p.Payload), `"text":"kept"`)
}

// TestToolSubscriptionSurvivesRestart: a subscription is in the store
// file, checksummed, without its callback id, and its callback works
// after the bus restarts on the file.
func TestToolSubscriptionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	srv := start(t, &bus.Options{Store: st}, toolsub.Options{})
	agent := bustest.Connect(t, srv.URL, "agent-1", bustest.Processed)
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "tool:timer")
	agent.WS.CloseNow()
	require.NoError(t, srv.Shutdown(t.Context()))
	srv.HTTP.Close()
	require.NoError(t, st.Close())

	file, err := os.ReadFile(filepath.Join(dir, "bub.db"))
	require.NoError(t, err)
	id := strings.TrimPrefix(cb.CallbackPath, "/v1/callbacks/")
	assert.False(t, bytes.Contains(file, []byte(id)), "the store holds the callback id")
	assert.True(t, bytes.Contains(file, []byte(`"toolCallId":"call-1"`)))

	st, err = store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	srv = start(t, &bus.Options{Store: st}, toolsub.Options{})
	assert.Equal(t, float64(1), bustest.Metric(t, srv.Registry(), "bub_tool_subscriptions", ""))
	_, got := agentOn(t, srv, "agent-1", "tg:1")
	a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "after restart", true), nil)
	require.Equal(t, 200, a.status, string(a.body))
	p := recvEvent(t, got)
	assert.Contains(t, string(p.Payload), "after restart")
	assert.Equal(t, float64(0), bustest.Metric(t, srv.Registry(), "bub_tool_subscriptions", ""))
}

// TestToolSubscriptionsOnCluster: a subscription started on one node
// is known to the other, through the cluster's store: an event posted
// to the other node reaches the agent on the first; a cancel on the
// other node ends it on both.
func TestToolSubscriptionsOnCluster(t *testing.T) {
	nodes := startCluster(t)
	agent, got := agentOn(t, nodes[0], "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	// The other node's index follows the bucket's watch.
	require.Eventually(t, func() bool { return bustest.Metric(t, nodes[1].Registry(), "bub_tool_subscriptions", "") == 1 }, bustest.Timeout, 10*time.Millisecond)
	a := do(t, nodes[1], "POST", cb.CallbackPath, event("tg:1", "call-1", "via n2", false), nil)
	require.Equal(t, 200, a.status, string(a.body))
	p := recvEvent(t, got)
	assert.Contains(t, string(p.Payload), "via n2")

	// The agent's own clientId, publish-only, so as not to take its
	// connection over.
	other := bustest.Dial(t, nodes[1].URL)
	other.MustCall(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "agent-1", PublishOnly: true}, nil)
	var list protocol.ToolSubscriptionListResult
	other.MustCall(protocol.MethodToolSubscriptionList, map[string]any{"group_id": "tg:1"}, &list)
	require.Len(t, list.Subscriptions, 1)
	other.MustCall(protocol.MethodToolSubscriptionCancel, protocol.ToolSubscriptionCancelParams{GroupID: "tg:1", ToolCallID: "call-1"}, nil)
	// The callback is refused once the store has no subscription; the
	// gauge follows the node's index, which the bucket's watch updates
	// on its own goroutine, a moment later: the wait is for both (the
	// gauge was once read as 1 just after the first 404).
	require.Eventually(t, func() bool {
		return do(t, nodes[0], "POST", cb.CallbackPath, event("tg:1", "call-1", "x", false), nil).status == 404 &&
			bustest.Metric(t, nodes[0].Registry(), "bub_tool_subscriptions", "") == 0
	}, bustest.Timeout, 10*time.Millisecond, "the first node to see the cancel, in its callbacks and its gauge")
}

// TestToolSubscriptionFinalIsLast: events posted at once with a final
// one: each is either delivered (200) or refused as gone (404), the
// final one is delivered last, and every 200 was delivered once.
func TestToolSubscriptionFinalIsLast(t *testing.T) {
	srv := start(t, nil, toolsub.Options{EventRate: 1000, EventBurst: 1000})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	const n = 20
	statuses := make(chan int, n)
	for i := range n {
		go func() {
			a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", strconv.Itoa(i), i == n/2), nil)
			statuses <- a.status
		}()
	}
	delivered := 0
	for range n {
		switch s := <-statuses; s {
		case 200:
			delivered++
		case 404:
		default:
			t.Errorf("status %d", s)
		}
	}
	require.GreaterOrEqual(t, delivered, 1, "the final event was refused")
	// The test's client answers deliveries concurrently, so the order
	// they reach got says nothing; the bus names messages in the order
	// it publishes them.
	last, final := -1, -1
	for range delivered {
		p := recvEvent(t, got)
		var ev protocol.SubscriptionEvent
		require.NoError(t, json.Unmarshal(p.Payload, &ev))
		_, num, _ := strings.Cut(p.MessageID, "-")
		seq, err := strconv.Atoi(num)
		require.NoError(t, err, p.MessageID)
		last = max(last, seq)
		if ev.Final {
			assert.Equal(t, strconv.Itoa(n/2), ev.Text)
			final = seq
		}
	}
	assert.Equal(t, last, final, "an event was published after the final one")
	select {
	case p := <-got:
		t.Fatalf("more deliveries than 200s: %s", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestToolSubscriptionFinalRefusedKeepsIt: a final event the bus cannot
// publish (here the owner's publish rate) leaves the subscription as it
// was, so the tool can send it again; nothing is delivered.
func TestToolSubscriptionFinalRefusedKeepsIt(t *testing.T) {
	srv := start(t, &bus.Options{Limits: bus.Limits{PublishRate: 0.001, PublishBurst: 1}}, toolsub.Options{})
	agent, got := agentOn(t, srv, "agent-1", "tg:1")
	cb := startToolSub(t, agent, "tg:1", "call-1", "tg:1", "")
	a := do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "1", false), nil)
	require.Equal(t, 200, a.status, string(a.body))
	recvEvent(t, got)

	a = do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "last", true), nil)
	assert.Equal(t, int64(protocol.CodeRateLimited), a.errorCode(), string(a.body))
	var list protocol.ToolSubscriptionListResult
	agent.MustCall(protocol.MethodToolSubscriptionList, map[string]any{}, &list)
	require.Len(t, list.Subscriptions, 1, "a final event that was refused ended its subscription")
	assert.Equal(t, "call-1", list.Subscriptions[0].ToolCallID)
	a = do(t, srv, "POST", cb.CallbackPath, event("tg:1", "call-1", "last", true), nil)
	assert.Equal(t, int64(protocol.CodeRateLimited), a.errorCode(), "the callback was forgotten: %s", a.body)
	select {
	case p := <-got:
		t.Fatalf("a refused event was delivered: %s", p.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestToolSubscriptionMethodsNeedInitialize: the add-on's methods, as
// the core's, answer -32002 before initialize, and one of them is not
// registered twice.
func TestToolSubscriptionMethodsNeedInitialize(t *testing.T) {
	srv := start(t, nil, toolsub.Options{})
	fresh := bustest.Dial(t, srv.URL)
	for _, name := range []string{protocol.MethodToolSubscriptionStart, protocol.MethodToolSubscriptionCancel, protocol.MethodToolSubscriptionList} {
		r := fresh.Call(name, map[string]any{"group_id": "g", "tool_call_id": "c"})
		require.NotNil(t, r.Error, name)
		assert.Equal(t, int64(protocol.CodeNotInitialized), r.Error.Code, name)
	}
	_, err := bus.New(&bus.Options{Extensions: []bus.Extension{
		toolsub.New(&toolsub.Options{Store: store.OpenMemory()}), toolsub.New(&toolsub.Options{Store: store.OpenMemory()}),
	}})
	assert.ErrorContains(t, err, "registered already")
}
