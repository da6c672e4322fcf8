package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
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

// metric returns the value of the bus metric name with the given label
// value ("" for none), or -1 when it is not there.
func metric(t *testing.T, srv *bustest.Server, name, label string) float64 {
	t.Helper()
	return bustest.Metric(t, srv, name, label)
}

func refusals(t *testing.T, srv *bustest.Server, limit string) float64 {
	t.Helper()
	return metric(t, srv, "bub_limit_refusals_total", limit)
}

// requireCode checks that r is the error code, with a message naming
// what it must.
func requireCode(t *testing.T, r bustest.Response, code int64, names string) {
	t.Helper()
	require.NotNil(t, r.Error, "want error %d, got result %s", code, r.Result)
	require.Equal(t, code, r.Error.Code, r.Error.Message)
	require.Contains(t, r.Error.Message, names)
}

// requireServes checks that the bus still relays between two fresh
// clients.
func requireServes(t *testing.T, srv *bustest.Server, topic string) {
	t.Helper()
	bustest.Connect(t, srv.URL, topic+"-sub", bustest.Processed).Subscribe(topic, "")
	r := bustest.Connect(t, srv.URL, topic+"-pub", nil).Publish(topic, "t")
	require.Len(t, r.Acks, 1)
	require.True(t, r.Acks[0].Processed, "%+v", r.Acks[0])
}

// dialStatus attempts a WebSocket upgrade and returns the HTTP status and
// body of a refusal, or 101 for an upgrade.
func dialStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil {
		t.Cleanup(func() { _ = ws.CloseNow() })
		return http.StatusSwitchingProtocols, ""
	}
	require.NotNil(t, resp, "dial failed without a response: %v", err)
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestLimitConnections(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxConnections: 2}})
	sub := bustest.Connect(t, srv.URL, "sub", bustest.Processed)
	sub.Subscribe("t", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)

	code, body := dialStatus(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "max_connections 2")
	require.Equal(t, 1.0, refusals(t, srv, "max_connections"))

	// Those connected are served; a freed place is taken again.
	require.True(t, pub.Publish("t", "t").Acks[0].Processed)
	require.NoError(t, pub.WS.Close(websocket.StatusNormalClosure, ""))
	// The bus frees the place once it has cleaned up after the peer,
	// a moment after the close handshake: dial until admitted.
	require.Eventually(t, func() bool { code, _ := dialStatus(t, srv.URL); return code == http.StatusSwitchingProtocols },
		bustest.Timeout, time.Millisecond)
}

// A connection flood is one log line, not one per refused connection;
// the metric counts each, and the log counts them every 10 s while they
// go on (internal/streak's TestRuns).
func TestLimitConnectionsLogOnce(t *testing.T) {
	var log lockedLog
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxConnections: 1}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	bustest.Connect(t, srv.URL, "only", nil)
	const flood = 20
	for range flood {
		code, _ := dialStatus(t, srv.URL)
		require.Equal(t, http.StatusServiceUnavailable, code)
	}
	require.Equal(t, float64(flood), refusals(t, srv, "max_connections"))
	require.Equal(t, 1, strings.Count(log.String(), "connection refused"), log.String())
	require.Contains(t, log.String(), "limit=max_connections max=1")
}

func TestLimitConnectionsPerAddr(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxConnectionsPerAddr: 1}})
	c := bustest.Connect(t, srv.URL, "only", bustest.Processed)
	c.Subscribe("self", "")
	code, body := dialStatus(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "max_connections_per_addr 1")
	require.Equal(t, 1.0, refusals(t, srv, "max_connections_per_addr"))
	require.True(t, c.Publish("self", "t").Acks[0].Processed)

	// Lifting the limit at run time admits the next one.
	srv.SetLimits(bus.Limits{MaxConnectionsPerAddr: -1})
	requireServes(t, srv, "after")
}

func TestLimitHandshakeTimeout(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{HandshakeTimeout: time.Hour}})
	healthy := bustest.Connect(t, srv.URL, "healthy", bustest.Processed)
	healthy.Subscribe("self", "")
	// A short deadline applies to connections made from now on; the
	// initialized one is not touched.
	srv.SetLimits(bus.Limits{HandshakeTimeout: 50 * time.Millisecond})
	idle := bustest.Dial(t, srv.URL)
	require.Equal(t, websocket.StatusCode(protocol.CloseHandshakeTimeout), idle.Closed())
	require.Equal(t, 1.0, refusals(t, srv, "handshake_timeout"))
	require.True(t, healthy.Publish("self", "t").Acks[0].Processed)
}

func TestLimitSubscriptions(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxSubscriptions: 2}})
	c := bustest.Connect(t, srv.URL, "c", bustest.Processed)
	c.Subscribe("a", "")
	c.Subscribe("b", "")
	requireCode(t, c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "c"}), protocol.CodeLimitReached, "max_subscriptions")
	require.Equal(t, 1.0, refusals(t, srv, "max_subscriptions"))
	// Unsubscribing frees a place; other connections have their own.
	c.MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "a"}, nil)
	c.Subscribe("c", "")
	requireServes(t, srv, "other")
}

func TestLimitPatterns(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxTopicBytes: 10, MaxPatternWildcards: 3}})
	c := bustest.Connect(t, srv.URL, "c", bustest.Processed)
	for _, tc := range []struct{ pattern, refusal string }{
		{"abcdefghijk", "max_topic_bytes 10"},
		{"*?*?", "max_pattern_wildcards 3"},
		{"[ab]?x*y?", "max_pattern_wildcards 3"},
	} {
		requireCode(t, c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: tc.pattern}), protocol.CodeInvalidParams, tc.refusal)
	}
	// A run of stars counts once; exactly at the limits is allowed.
	c.Subscribe("a**b?c*", "")
	c.Subscribe("abcdefghij", "")
	requireCode(t, c.Call(protocol.MethodSendMessage, map[string]any{"topic": "abcdefghijk", "payload": map[string]any{"type": "t"}}),
		protocol.CodeInvalidParams, "max_topic_bytes 10")
	require.Equal(t, 2.0, refusals(t, srv, "max_topic_bytes"))
	require.Equal(t, 2.0, refusals(t, srv, "max_pattern_wildcards"))
	require.True(t, c.Publish("abcdefghij", "t").Acks[0].Processed)
	requireServes(t, srv, "ok")
}

// TestLimitPending: holds count against the publisher's identity and the
// bus; at a cap, publishes are refused up front, and accepted again once
// the pending work drains.
func TestLimitPending(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour,
		Limits: bus.Limits{MaxPendingPerIdentity: 2, MaxPending: 3}})
	p1 := bustest.Connect(t, srv.URL, "p1", nil)
	p2 := bustest.Connect(t, srv.URL, "p2", nil)
	require.True(t, p1.Publish("agent:away", "t").Held)
	require.True(t, p1.Publish("agent:away", "t").Held)
	requireCode(t, p1.Call(protocol.MethodSendMessage, map[string]any{"topic": "agent:away", "payload": map[string]any{"type": "t"}}),
		protocol.CodeLimitReached, `max_pending_per_identity: identity "p1" holds 2`)
	// Another identity still publishes, up to the bus's cap.
	require.True(t, p2.Publish("agent:away", "t").Held)
	requireCode(t, p2.Call(protocol.MethodSendMessage, map[string]any{"topic": "elsewhere", "payload": map[string]any{"type": "t"}}),
		protocol.CodeLimitReached, "max_pending: the bus holds 3")
	require.Equal(t, 1.0, refusals(t, srv, "max_pending_per_identity"))
	require.Equal(t, 1.0, refusals(t, srv, "max_pending"))

	// The agent appears: the holds are delivered and the caps free up.
	_, got := bustest.Collect(t, srv.URL, "away", "agent:away")
	for range 3 {
		recv(t, got)
	}
	require.Eventually(t, func() bool {
		total, _, err := srv.Store.PendingUsage("p1")
		return err == nil && total.Entries == 0
	}, bustest.Timeout, time.Millisecond)
	require.True(t, p1.Publish("agent:away", "t").Acks[0].Processed)
}

func TestLimitReplayIDs(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{MaxReplayIDs: 2}})
	c := bustest.Connect(t, srv.URL, "admin", nil)
	requireCode(t, c.Call(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{"d-1", "d-2", "d-3"}}), protocol.CodeLimitReached, "max_replay_ids")
	require.Equal(t, 1.0, refusals(t, srv, "max_replay_ids"))
	// Within the limit the call goes through (the ids do not exist).
	c.MustCall(protocol.MethodDLQReplay, protocol.DLQReplayParams{IDs: []string{"d-1", "d-2"}}, nil)
	requireServes(t, srv, "ok")
}

// startSlowSubscriber starts a bus that stops waiting on a subscriber
// after 2 delivery timeouts of a second, and connects "slow" on "work",
// which answers nothing.
func startSlowSubscriber(t *testing.T) (*bustest.Server, *bustest.Client) {
	t.Helper()
	srv := bustest.Start(t, &bus.Options{DeliveryTimeout: time.Second, RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour,
		Limits: bus.Limits{SlowSubscriberTimeouts: 2}})
	slow := bustest.Dial(t, srv.URL)
	slow.Initialize("slow")
	slow.Subscribe("work", "")
	return srv, slow
}

// TestLimitSlowSubscriber: a subscriber that reads but never answers is
// waited on for SlowSubscriberTimeouts deliveries; after that its
// deliveries fail at once and are retried, until it answers one, late
// or not.
func TestLimitSlowSubscriber(t *testing.T) {
	// Mostly waiting (or busy on its own bus): it overlaps the others.
	t.Parallel()
	srv, slow := startSlowSubscriber(t)
	pub := bustest.Connect(t, srv.URL, "pub", nil)

	var frames []json.RawMessage
	for range 2 {
		r := pub.Publish("work", "t")
		require.Len(t, r.Acks, 1)
		assert.Contains(t, r.Acks[0].Error, "timeout")
		assert.True(t, r.Acks[0].Retrying)
		frames = append(frames, slow.Recv())
	}
	require.Equal(t, 1.0, metric(t, srv, "bub_slow_subscribers", ""))
	r := pub.Publish("work", "t")
	require.Len(t, r.Acks, 1)
	require.Contains(t, r.Acks[0].Error, "slow_subscriber", "the third delivery must not be waited for")
	require.True(t, r.Acks[0].Retrying, "a skipped delivery is retried")
	require.Equal(t, 1.0, refusals(t, srv, "slow_subscriber_timeouts"))
	requireServes(t, srv, "others")

	// A late answer marks the subscriber alive.
	answerLate(t, slow, frames[0])
	slow.OnProcess(bustest.Processed)
	r = pub.Publish("work", "t")
	require.True(t, r.Acks[0].Processed, "%+v", r.Acks[0])
	require.Equal(t, 0.0, metric(t, srv, "bub_slow_subscribers", ""))
}

// answerLate answers the processMessage call frame, whose delivery timed
// out, with processed, and returns once the bus has read the answer: the
// ping after it is answered after it is read.
func answerLate(t *testing.T, sub *bustest.Client, frame json.RawMessage) {
	t.Helper()
	var call struct {
		ID json.RawMessage `json:"id"`
	}
	require.NoError(t, json.Unmarshal(frame, &call))
	sub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"processed":true}}`, call.ID))
	sub.MustCall(protocol.MethodPing, nil, nil)
}

// TestLimitSlowSubscriberCount: deliveries in flight when a subscriber
// turns slow do not add to the count its publishers are told: the ack
// says the limit's number of deliveries, not one more per straggler.
func TestLimitSlowSubscriberCount(t *testing.T) {
	t.Parallel()
	srv, slow := startSlowSubscriber(t)
	// Three deliveries in flight at once, from three publishers.
	var pubs []*bustest.Client
	for i := range 3 {
		p := bustest.Dial(t, srv.URL)
		p.Initialize(fmt.Sprintf("pub-%d", i))
		p.Send(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"work","payload":{"type":"t"}}}`)
		pubs = append(pubs, p)
	}
	for range 3 {
		slow.Recv()
	}
	for _, p := range pubs {
		assert.Contains(t, string(p.Recv()), "timeout")
	}
	r := bustest.Connect(t, srv.URL, "late", nil).Publish("work", "t")
	require.Len(t, r.Acks, 1)
	assert.Contains(t, r.Acks[0].Error, `client "slow" left its last 2 deliveries unanswered`)
}

// TestLimitPublishRate: a connection beyond its rate is refused with how
// long to wait; other connections have buckets of their own, and a new
// rate applies to existing connections.
func TestLimitPublishRate(t *testing.T) {
	// One token per thousand seconds: the bucket never refills in a test.
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{PublishRate: 0.001, PublishBurst: 2}})
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	pub.Publish("t", "t")
	pub.Publish("t", "t")
	r := pub.Call(protocol.MethodSendMessage, map[string]any{"topic": "t", "payload": map[string]any{"type": "t"}})
	requireCode(t, r, protocol.CodeRateLimited, "publish_rate")
	data, ok := r.Error.Data.(map[string]any)
	require.True(t, ok, "data %#v", r.Error.Data)
	wait, ok := data["retry_after_ms"].(float64)
	require.True(t, ok, "data %#v", data)
	require.Greater(t, wait, 900_000.0)
	require.LessOrEqual(t, wait, 1_000_000.0)
	require.Equal(t, 1.0, refusals(t, srv, "publish_rate"))
	requireServes(t, srv, "other")

	srv.SetLimits(bus.Limits{PublishRate: -1})
	pub.Publish("t", "t")
}

// TestLimitsDefaults: the zero Limits are the documented defaults, and
// every limit's refusal counter exists from the start.
func TestLimitsDefaults(t *testing.T) {
	srv := bustest.Start(t, nil)
	for _, limit := range []string{"max_connections", "max_connections_per_addr", "handshake_timeout", "max_subscriptions",
		"max_topic_bytes", "max_pattern_wildcards", "max_pending", "max_pending_per_identity", "max_stored_bytes",
		"max_stored_bytes_per_identity", "max_dead_letters", "max_dead_letter_bytes", "max_replay_ids",
		"slow_subscriber_timeouts", "publish_rate"} {
		assert.Equal(t, 0.0, refusals(t, srv, limit), limit)
	}
	c := bustest.Connect(t, srv.URL, "c", nil)
	requireCode(t, c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: strings.Repeat("*?", 5)}), protocol.CodeInvalidParams, "max_pattern_wildcards 8")
}

// TestLimitPendingSurvivesRestart: the counts are rebuilt from the store,
// so a restart does not reset an identity's cap.
func TestLimitPendingSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := func(st *store.Store) *bus.Options {
		return &bus.Options{Store: st, RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour, Limits: bus.Limits{MaxPendingPerIdentity: 1}}
	}
	st, err := store.Open(dir, nil)
	require.NoError(t, err)
	first := bustest.Start(t, opts(st))
	require.True(t, bustest.Connect(t, first.URL, "p1", nil).Publish("agent:away", "t").Held)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	first.HTTP.Close()
	require.NoError(t, st.Close())

	st, err = store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	second := bustest.Start(t, opts(st))
	p1 := bustest.Connect(t, second.URL, "p1", nil)
	requireCode(t, p1.Call(protocol.MethodSendMessage, map[string]any{"topic": "agent:away", "payload": map[string]any{"type": "t"}}),
		protocol.CodeLimitReached, "max_pending_per_identity")
	requireServes(t, second, "others")
}
