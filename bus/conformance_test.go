package bus_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// TestFrames sends raw frames and checks the exact reply, JSON-RPC 2.0's
// own examples first. An empty want means no reply at all.
func TestFrames(t *testing.T) {
	srv := bustest.Start(t, nil)
	tests := []struct {
		name  string
		frame string
		want  string
	}{
		{"invalid JSON", `{"jsonrpc":"2.0","method":"ping","params":{"a":`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the message is not valid JSON"}}`},
		{"number is not a request", `42`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be an object"}}`},
		{"object without method", `{"jsonrpc":"2.0","id":7}`, `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"invalid request: a request needs \"method\", a response \"result\" or \"error\""}}`},
		{"method not a string", `{"jsonrpc":"2.0","method":1,"params":"bar"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"}}`},
		{"wrong jsonrpc version", `{"jsonrpc":"1.0","method":"ping","id":1}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}`},
		{"params not structured", `{"jsonrpc":"2.0","method":"ping","params":3,"id":"x"}`, `{"jsonrpc":"2.0","id":"x","error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}`},
		{"id of the wrong type", `{"jsonrpc":"2.0","method":"ping","id":{}}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string, a number or null"}}`},
		{"empty batch", `[]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}`},
		{"invalid batch", `[1]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be an object"}}]`},
		{"invalid batch of three", `[1,2,3]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be an object"}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be an object"}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC message must be an object"}}]`},
		{"notification gets nothing", `{"jsonrpc":"2.0","method":"ping"}`, ``},
		{"unknown notification gets nothing", `{"jsonrpc":"2.0","method":"nope","params":[1]}`, ``},
		{"batch of notifications gets nothing", `[{"jsonrpc":"2.0","method":"ping"},{"jsonrpc":"2.0","method":"ping"}]`, ``},
		{"unknown method", `{"jsonrpc":"2.0","method":"foobar","id":"1"}`, `{"id":"1","error":{"code":-32601,"message":"method not found: no method \"foobar\" (docs/PROTOCOL.md lists the methods)"},"jsonrpc":"2.0"}`},
		{"method before initialize", `{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"a"},"id":2}`, `{"id":2,"error":{"code":-32005,"message":"not initialized: call initialize before subscribe"},"jsonrpc":"2.0"}`},
		{"id echoed exactly: big number", `{"jsonrpc":"2.0","method":"sendMessage","params":{},"id":123456789012345678901234567890}`, `{"id":123456789012345678901234567890,"error":{"code":-32005,"message":"not initialized: call initialize before sendMessage"},"jsonrpc":"2.0"}`},
		{"id echoed exactly: negative fraction", `{"jsonrpc":"2.0","method":"unsubscribe","params":{},"id":-1.5}`, `{"id":-1.5,"error":{"code":-32005,"message":"not initialized: call initialize before unsubscribe"},"jsonrpc":"2.0"}`},
		{"null id is a request", `{"jsonrpc":"2.0","method":"unsubscribe","params":{},"id":null}`, `{"id":null,"error":{"code":-32005,"message":"not initialized: call initialize before unsubscribe"},"jsonrpc":"2.0"}`},
		{"initialize without params", `{"jsonrpc":"2.0","method":"initialize","id":3}`, `{"id":3,"error":{"code":-32602,"message":"invalid params: initialize needs a params object"},"jsonrpc":"2.0"}`},
		{"initialize positional", `{"jsonrpc":"2.0","method":"initialize","params":["a"],"id":3}`, `{"id":3,"error":{"code":-32602,"message":"invalid params: initialize params must be an object, not positional"},"jsonrpc":"2.0"}`},
		{"initialize clientId wrong type", `{"jsonrpc":"2.0","method":"initialize","params":{"clientId":5},"id":3}`, `{"id":3,"error":{"code":-32602,"message":"invalid params: initialize: \"clientId\" must be a JSON string, got number"},"jsonrpc":"2.0"}`},
		{"initialize clientId missing", `{"jsonrpc":"2.0","method":"initialize","params":{},"id":3}`, `{"id":3,"error":{"code":-32002,"message":"invalid client info: clientId is required"},"jsonrpc":"2.0"}`},
		{"initialize clientId with space", `{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"a b"},"id":3}`, `{"id":3,"error":{"code":-32002,"message":"invalid client info: clientId \"a b\" has whitespace or a control character at byte 1"},"jsonrpc":"2.0"}`},
		{"initialize clientId too long", `{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"` + strings.Repeat("x", 257) + `"},"id":3}`, `{"id":3,"error":{"code":-32002,"message":"invalid client info: clientId is 257 bytes, more than 256"},"jsonrpc":"2.0"}`},
		{"ping before initialize", `{"jsonrpc":"2.0","method":"ping","id":"p"}`, `{"id":"p","error":{"code":-32005,"message":"not initialized: call initialize before ping"},"jsonrpc":"2.0"}`},
		{"mixed batch", `[{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"batcher"},"id":"1"},{"jsonrpc":"2.0","method":"ping"},{"foo":"boo"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]`, `batch`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := bustest.Dial(t, srv.URL)
			c.Send(tt.frame)
			switch tt.want {
			case "":
				c.NoFrame(200 * time.Millisecond)
			case "batch":
				replies := c.RecvBatch()
				byID := map[string]bustest.Response{}
				for _, r := range replies {
					byID[string(r.ID)] = r
				}
				require.Len(t, replies, 3, "ping, invalid request, unknown method; no entry for the notification")
				assert.NotNil(t, byID[`"1"`].Result)
				assert.Equal(t, int64(protocol.CodeInvalidRequest), byID["null"].Error.Code)
				assert.Equal(t, int64(protocol.CodeMethodNotFound), byID[`"9"`].Error.Code)
			default:
				assert.JSONEq(t, tt.want, string(c.Recv()))
			}
			// Whatever came before, the connection is still open.
			if r := c.Call(protocol.MethodPing, nil); r.Error != nil && r.Error.Code == bustest.NoResponse {
				t.Fatal("connection closed")
			}
		})
	}
}

func TestErrorCodes(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Dial(t, srv.URL)
	c.Initialize("codes")
	tests := []struct {
		name   string
		method string
		params any
		code   int64
		inText string
	}{
		{"second initialize", "initialize", protocol.InitializeParams{ClientID: "codes"}, protocol.CodeAlreadyInitialized, `"codes"`},
		{"subscribe without topic", "subscribe", map[string]any{}, protocol.CodeInvalidParams, "topic pattern is required"},
		{"subscribe bad pattern", "subscribe", map[string]any{"topic": "a:[b"}, protocol.CodeInvalidParams, `"a:[b"`},
		{"subscribe reserved char", "subscribe", map[string]any{"topic": "a:{b,c}"}, protocol.CodeInvalidParams, "reserved character"},
		{"subscribe unknown policy", "subscribe", map[string]any{"topic": "a", "policy": "sometimes"}, protocol.CodeInvalidParams, `policy "sometimes"`},
		{"subscribe twice", "subscribe", map[string]any{"topic": "dup"}, protocol.CodeAlreadySubscribed, `"dup"`},
		{"unsubscribe unknown", "unsubscribe", map[string]any{"topic": "never"}, protocol.CodeSubscriptionNotFound, `"never"`},
		{"unsubscribe without topic", "unsubscribe", map[string]any{}, protocol.CodeInvalidParams, "topic is required"},
		{"send without payload", "sendMessage", map[string]any{"topic": "a"}, protocol.CodeInvalidParams, "payload is required"},
		{"send payload not object", "sendMessage", map[string]any{"topic": "a", "payload": []int{1}}, protocol.CodeInvalidParams, "payload must be a JSON object"},
		{"send payload without type", "sendMessage", map[string]any{"topic": "a", "payload": map[string]any{"text": "hi"}}, protocol.CodeInvalidParams, "payload.type is required"},
		{"send payload type not string", "sendMessage", map[string]any{"topic": "a", "payload": map[string]any{"type": 3}}, protocol.CodeInvalidParams, "payload.type must be a string"},
		{"send without topic or default", "sendMessage", map[string]any{"payload": map[string]any{"type": "t"}}, protocol.CodeInvalidParams, "defaultTopic"},
		{"send to a pattern", "sendMessage", map[string]any{"topic": "inbound:*", "payload": map[string]any{"type": "t"}}, protocol.CodeInvalidParams, "pattern character"},
		{"send meta not object", "sendMessage", map[string]any{"topic": "a", "payload": map[string]any{"type": "t"}, "meta": "x"}, protocol.CodeInvalidParams, "meta must be a JSON object"},
		{"send topic wrong type", "sendMessage", map[string]any{"topic": 1, "payload": map[string]any{"type": "t"}}, protocol.CodeInvalidParams, `"topic" must be a JSON string`},
	}
	c.Subscribe("dup", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.Call(tt.method, tt.params)
			require.NotNil(t, r.Error, "want error %d, got result %s", tt.code, r.Result)
			assert.Equal(t, tt.code, r.Error.Code, r.Error.Message)
			assert.Contains(t, r.Error.Message, tt.inText)
		})
	}
}

func TestInitializeResult(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{ServerID: "bus-test", MaxMessageBytes: 2048, DeliveryTimeout: 1500 * time.Millisecond})
	r := bustest.Dial(t, srv.URL).Initialize("agent-1")
	// The peer learns the limits it would otherwise find out by a close.
	assert.Equal(t, &protocol.Limits{MaxMessageBytes: 2048, DeliveryTimeoutMs: 1500}, r.Limits)
	assert.Equal(t, "bus-test", r.ServerID)
	assert.Equal(t, "bub-bus", r.ServerInfo.Name)
	assert.NotEmpty(t, r.ServerInfo.Version)
	assert.True(t, r.Capabilities.Subscribe && r.Capabilities.Publish && r.Capabilities.ProcessMessage)
	assert.Equal(t, protocol.Policies, r.Capabilities.Policies)
}

// An oversized message closes with 1009, and the bus says so in its log
// and its metrics: the close used to leave no trace at all.
func TestOversizeFrameCloses1009(t *testing.T) {
	var log lockedLog
	srv := bustest.Start(t, &bus.Options{MaxMessageBytes: 1024, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	c := bustest.Dial(t, srv.URL)
	c.Initialize("big")
	c.Send(`{"jsonrpc":"2.0","method":"ping","id":1,"params":{"pad":"` + strings.Repeat("x", 2048) + `"}}`)
	assert.Equal(t, websocket.StatusMessageTooBig, c.Closed())
	require.Eventually(t, func() bool {
		n, err := testutil.GatherAndCount(srv.Registry(), "bub_connection_closes_total")
		return err == nil && n == 1 && strings.Contains(log.String(), "message too big")
	}, bustest.Timeout, 10*time.Millisecond, "log: %s", &log)
	line := log.String()
	for _, want := range []string{"client=big", "remote=", "max_message_bytes=1024"} {
		assert.Contains(t, line, want)
	}
	assert.NoError(t, testutil.GatherAndCompare(srv.Registry(), strings.NewReader(`
# HELP bub_connection_closes_total Connections the bus closed, by reason.
# TYPE bub_connection_closes_total counter
bub_connection_closes_total{reason="message too big"} 1
`), "bub_connection_closes_total"))
}

// lockedLog is a log destination the bus writes while the test reads.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestBinaryFrameRefused(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Dial(t, srv.URL)
	require.NoError(t, c.WS.Write(t.Context(), websocket.MessageBinary, []byte(`{"jsonrpc":"2.0","method":"ping","id":1}`)))
	r := c.RecvResponse()
	require.NotNil(t, r.Error)
	assert.Equal(t, int64(protocol.CodeInvalidRequest), r.Error.Code)
	c.Initialize("binary")
}

func TestPing(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Connect(t, srv.URL, "pinger", nil)
	c.Send(`{"jsonrpc":"2.0","method":"ping","id":"p"}`)
	r := c.RecvResponse()
	assert.JSONEq(t, `"p"`, string(r.ID))
	var ping protocol.PingResult
	require.NoError(t, json.Unmarshal(r.Result, &ping), "ping: %s", r.Result)
	ts, err := time.Parse(time.RFC3339, ping.Timestamp)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), ts, time.Minute)
	assert.True(t, strings.HasSuffix(ping.Timestamp, "Z"), "timestamp %s is not UTC", ping.Timestamp)
}

func TestTakeover(t *testing.T) {
	srv := bustest.Start(t, nil)
	old := bustest.Connect(t, srv.URL, "agent-x", bustest.Processed)
	old.Subscribe("agent:x", "")
	fresh := bustest.Connect(t, srv.URL, "agent-x", bustest.Processed)
	assert.Equal(t, bus.StatusTakenOver, old.Closed())

	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("agent:x", "t")
	assert.False(t, r.Success, "the old connection's subscription must be gone")
	fresh.Subscribe("agent:x", "")
	r = pub.Publish("agent:x", "t")
	require.True(t, r.Success)
	assert.Equal(t, "agent-x", r.Acks[0].ClientID)
}

// TestPublishOnly: a tool publishing as an agent does not knock the
// agent's connection off the bus, and cannot subscribe.
func TestPublishOnly(t *testing.T) {
	srv := bustest.Start(t, nil)
	got := make(chan protocol.ProcessMessageParams, 1)
	agent := bustest.Connect(t, srv.URL, "agent-1", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	agent.Subscribe("agent:agent-1", "")
	tool := bustest.Dial(t, srv.URL)
	tool.MustCall(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "agent-1", PublishOnly: true}, nil)
	r := tool.Publish("agent:agent-1", "note")
	require.True(t, r.Success, "the agent is still connected")
	assert.Equal(t, "agent-1", (<-got).From)
	sub := tool.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "x"})
	require.NotNil(t, sub.Error)
	assert.Equal(t, int64(protocol.CodeInvalidParams), sub.Error.Code)
	assert.Contains(t, sub.Error.Message, "publishOnly")
}

func TestDefaultTopic(t *testing.T) {
	srv := bustest.Start(t, nil)
	sub := bustest.Connect(t, srv.URL, "sub", bustest.Processed)
	sub.Subscribe("tg:1", "")
	pub := bustest.Dial(t, srv.URL)
	pub.MustCall("initialize", protocol.InitializeParams{ClientID: "pub", DefaultTopic: "tg:1"}, nil)
	var r protocol.SendMessageResult
	pub.MustCall("sendMessage", map[string]any{"payload": map[string]any{"type": "t"}}, &r)
	assert.True(t, r.Success)
}

func TestInFlightBound(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{MaxInFlight: 1})
	release := make(chan struct{})
	delivered := make(chan struct{}, 1)
	sub := bustest.Connect(t, srv.URL, "slow", func(protocol.ProcessMessageParams) any {
		delivered <- struct{}{}
		<-release
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("slow", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	first := make(chan bustest.Response)
	go func() {
		first <- pub.Call("sendMessage", map[string]any{"topic": "slow", "payload": map[string]any{"type": "t"}})
	}()
	<-delivered // the first send now holds the only slot
	second := pub.Call("sendMessage", map[string]any{"topic": "slow", "payload": map[string]any{"type": "t"}})
	require.NotNil(t, second.Error)
	assert.Equal(t, int64(protocol.CodeTooManyRequests), second.Error.Code)
	// Quick methods are not bounded: the peer is still served.
	pub.MustCall(protocol.MethodPing, nil, nil)
	close(release)
	assert.Nil(t, (<-first).Error)
}

func TestShutdown(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Connect(t, srv.URL, "a", nil)
	require.NoError(t, srv.Shutdown(t.Context()))
	assert.Equal(t, websocket.StatusGoingAway, c.Closed())
	resp, err := srv.HTTP.Client().Get(srv.HTTP.URL + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
}

// TestKeepaliveDropsSilentPeer: a peer that stops answering pings is
// dropped, and its subscriptions with it.
func TestKeepaliveDropsSilentPeer(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{PingInterval: 100 * time.Millisecond})
	ws := dialSilentPeer(t, srv.URL,
		`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"silent"},"id":1}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"quiet"},"id":2}`)
	defer ws.CloseNow()
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	require.Eventually(t, func() bool {
		return !pub.Publish("quiet", "t").Success
	}, bustest.Timeout, 50*time.Millisecond, "the silent peer should be dropped")
}

// TestShutdownDrainsInFlight: a delivery running when Shutdown starts
// completes, and its publisher gets the result.
func TestShutdownDrainsInFlight(t *testing.T) {
	srv := bustest.Start(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	defer free() // should the test fail before the delivery is let go
	sub := bustest.Connect(t, srv.URL, "slow", func(protocol.ProcessMessageParams) any {
		close(started)
		<-release
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("slow", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	result := make(chan bustest.Response, 1)
	go func() {
		result <- pub.Call(protocol.MethodSendMessage, map[string]any{"topic": "slow", "payload": map[string]any{"type": "t"}})
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(t.Context()) }()
	// The delivery ends only once Shutdown is under way: /readyz says
	// 503 from its start.
	checkfor.Check(t, bustest.Timeout, func() error {
		resp, err := srv.HTTP.Client().Get(srv.HTTP.URL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz answers %s with Shutdown called, want 503", resp.Status)
		}
		return nil
	})
	free()
	r := <-result
	require.Nil(t, r.Error, "the in-flight publish finishes")
	var res protocol.SendMessageResult
	require.NoError(t, json.Unmarshal(r.Result, &res))
	assert.True(t, res.Acks[0].Processed)
	require.NoError(t, <-shut)
	assert.Equal(t, websocket.StatusGoingAway, pub.Closed())
}

// TestSlowReaderEvicted: a subscriber that stops reading is disconnected
// once a write to it times out, and never holds up other peers.
func TestSlowReaderEvicted(t *testing.T) {
	// The slow-subscriber limit would stop writing to the stalled peer
	// after a few timeouts, before the write timeout this test is about.
	// The write timeout is every connection's: at 200 ms a loaded
	// machine's -race test client now and then read its own answers too
	// late, and the publisher was the one evicted.
	srv := bustest.Start(t, &bus.Options{WriteTimeout: time.Second, DeliveryTimeout: 100 * time.Millisecond, MaxMessageBytes: 4 << 20, MaxAttempts: 1,
		Limits: bus.Limits{SlowSubscriberTimeouts: -1}})
	ws := dialSilentPeer(t, srv.URL,
		`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"stalled"},"id":1}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"big"},"id":2}`)
	defer ws.CloseNow()
	healthy := bustest.Connect(t, srv.URL, "healthy", bustest.Processed)
	healthy.Subscribe("small", "")

	pub := bustest.Connect(t, srv.URL, "pub", nil)
	pad := strings.Repeat("x", 1<<20)
	big := map[string]any{"topic": "big", "payload": map[string]any{"type": "t", "pad": pad}}
	deadline := time.Now().Add(bustest.Timeout)
	for {
		// Fill the stalled peer's socket buffers, a few megabytes at a time.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { pub.Call(protocol.MethodSendMessage, big) })
		}
		start := time.Now()
		r := pub.Publish("small", "t")
		require.True(t, r.Success)
		assert.Less(t, time.Since(start), 2*time.Second, "a stalled peer must not hold up others")
		wg.Wait()
		if !pub.Publish("big", "t").Success {
			return // evicted: its subscription is gone
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled peer was never evicted")
		}
	}
}

// TestHTTPEndpoints: liveness, readiness and metrics on the bus's
// listener, the metrics counting what happened and passing promlint.
func TestHTTPEndpoints(t *testing.T) {
	srv := bustest.Start(t, nil)
	get := func(path string) (int, string) {
		resp, err := srv.HTTP.Client().Get(srv.HTTP.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := get("/healthz")
	assert.Equal(t, 200, code)
	code, _ = get("/readyz")
	assert.Equal(t, 200, code)

	bustest.Connect(t, srv.URL, "sub", bustest.Processed).Subscribe("m", "")
	bustest.Connect(t, srv.URL, "pub", nil).Publish("m", "t")
	_, metrics := get("/metrics")
	for _, want := range []string{
		"bub_connections 2",
		"bub_subscriptions 1",
		`bub_messages_published_total{outcome="routed"} 1`,
		`bub_deliveries_total{outcome="processed"} 1`,
		"bub_delivery_duration_seconds_count 1",
		`bub_requests_total{method="sendMessage",outcome="ok"} 1`,
		"bub_dead_letters 0",
	} {
		assert.Contains(t, metrics, want+"\n")
	}
	problems, err := testutil.GatherAndLint(srv.Registry())
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "bub_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	code, _ = get("/nowhere")
	assert.Equal(t, 404, code)
}
