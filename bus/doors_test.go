package bus_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// The reproductions of issue 36: doors added after the WebSocket one
// (HTTP, webhooks, tool callbacks, idempotency) kept fewer of its
// promises. Each test here failed on the bus before that issue.

// doorsAuth starts a bus with auth: "bob-sub" subscribes to its own
// topic, "bob-pub" only publishes to it, and "slow" publishes a burst of
// 5, then one every 100 s (so that no test waits long enough to see a
// token come back), as any clientId slow-*.
func doorsAuth(t *testing.T, limits bus.Limits) *bustest.Server {
	t.Helper()
	o := doorsOptions(t, limits)
	// Its journal streams count against an identity's cap too.
	o.Extensions = []bus.Extension{journal.New(nil)}
	return bustest.Start(t, o)
}

// doorsOptions are doorsAuth's options.
func doorsOptions(t *testing.T, limits bus.Limits) *bus.Options {
	t.Helper()
	dir := t.TempDir()
	a, err := auth.New(auth.Config{Identities: []auth.Identity{
		{Name: "bob-sub", TokenSHA256: authtest.SHA256("sub-token"), Grant: auth.Grant{
			ClientIDs:      []string{"bob-sub", "bob-sub-*"},
			MaxConnections: 1,
			Subscribe:      auth.Rules{Allow: []string{"agent:{{clientId}}"}},
		}},
		{Name: "bob-pub", TokenSHA256: authtest.SHA256("pub-token"), Grant: auth.Grant{
			ClientIDs:   []string{"bob-pub"},
			Publish:     auth.Rules{Allow: []string{"agent:bob-sub"}},
			PublishOnly: true,
		}},
		{Name: "slow", TokenSHA256: authtest.SHA256("slow-token"), Grant: auth.Grant{
			ClientIDs: []string{"slow-*"},
			Publish:   auth.Rules{Allow: []string{"jobs:*"}},
			Subscribe: auth.Rules{Allow: []string{"jobs:*"}},
			Rate:      auth.Rate{PerSecond: 0.01, Burst: 5},
		}},
	}}, dir)
	require.NoError(t, err)
	return &bus.Options{Auth: a, Limits: limits}
}

// idempotencyBuses are the buses the idempotency limits are checked on:
// one node, and a cluster of two whose nodes share the keys and count
// them (docs/CLUSTER.md, "Auth, limits and events cluster-wide"). start
// returns the nodes, the first one first; a test publishes on the first
// and checks on the last, the same node when there is one.
var idempotencyBuses = []struct {
	name  string
	start func(t *testing.T, o *bus.Options) []*bustest.Server
}{
	{"one node", func(t *testing.T, o *bus.Options) []*bustest.Server { return []*bustest.Server{bustest.Start(t, o)} }},
	{"cluster", func(t *testing.T, o *bus.Options) []*bustest.Server { return clustertest.Start(t, o, "a", "b") }},
}

// waitKeys waits until srv counts entries idempotency records of
// identity: on a cluster, until its node's watch applied the other
// node's writes.
func waitKeys(t *testing.T, srv *bustest.Server, identity string, entries int) {
	t.Helper()
	checkfor.Check(t, clusterWait, func() error {
		u, err := bus.IdempotentUsage(srv.Server, identity)
		if err != nil || u.Entries != entries {
			return fmt.Errorf("%q holds %d idempotency records (%v), want %d", identity, u.Entries, err, entries)
		}
		return nil
	})
}

// TestIdempotencyRecordsBoundedAndCounted (reproduction 1): a
// subscriber that answers every delivery with a large message cannot
// make its publisher's idempotency records large; the records count
// against the publisher's stored bytes, so new keys are refused with
// the same -32011 as held messages once they fill it; on a cluster too,
// with the subscriber on the other node, which counts the records as
// the publisher's does.
func TestIdempotencyRecordsBoundedAndCounted(t *testing.T) {
	t.Parallel()
	for _, on := range idempotencyBuses {
		t.Run(on.name, func(t *testing.T) {
			const quota = 16 << 10
			nodes := on.start(t, doorsOptions(t, bus.Limits{MaxStoredBytesPerIdentity: quota}))
			srv, other := nodes[0], nodes[len(nodes)-1]
			big := strings.Repeat("x", 64<<10)
			sub := bustest.DialToken(t, other.URL, "sub-token")
			sub.OnProcess(func(protocol.ProcessMessageParams) any {
				return protocol.ProcessMessageResult{Processed: true, Message: big}
			})
			sub.Initialize("bob-sub")
			sub.Subscribe("agent:bob-sub", "")
			pub := bustest.DialToken(t, srv.URL, "pub-token")
			r := pub.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "bob-pub", PublishOnly: true})
			require.Nil(t, r.Error)

			send := func(i int) bustest.Response {
				return pub.Call(protocol.MethodSendMessage, map[string]any{
					"topic": "agent:bob-sub", "payload": map[string]any{"type": "t"},
					"meta": map[string]any{"idempotency_key": fmt.Sprintf("k-%d", i)},
				})
			}
			accepted := 0
			var refused bustest.Response
			for i := range 200 {
				r := send(i)
				if r.Error != nil {
					refused = r
					break
				}
				var res protocol.SendMessageResult
				require.NoError(t, json.Unmarshal(r.Result, &res))
				require.Len(t, res.Acks, 1, "the first answer has the subscriber's ack")
				accepted++
			}
			requireCode(t, refused, protocol.CodeLimitReached, `max_stored_bytes_per_identity: identity "bob-pub" holds`)
			require.Greater(t, accepted, 10, "each record keeps no subscriber answer, so many fit")
			usage, err := bus.IdempotentUsage(srv.Server, "bob-pub")
			require.NoError(t, err)
			require.Equal(t, accepted, usage.Entries)
			require.LessOrEqual(t, usage.Bytes, int64(quota+1024), "the records stay within the quota, give or take the last")
			waitKeys(t, other, "bob-pub", accepted)

			// A repeat still gets its bounded answer: the message id and outcome.
			again := send(0)
			require.Nil(t, again.Error)
			var res protocol.SendMessageResult
			require.NoError(t, json.Unmarshal(again.Result, &res))
			require.True(t, res.Success)
			require.Empty(t, res.Acks)
			require.NotContains(t, string(again.Result), "xxxx")
		})
	}
}

// TestIdempotencyKeysCapped: an identity holds at most
// max_idempotency_keys_per_identity keys in the window; a new one beyond
// is refused by every door with -32011 and when to retry; on a cluster,
// by every node, each counting the keys the others took.
func TestIdempotencyKeysCapped(t *testing.T) {
	t.Parallel()
	for _, on := range idempotencyBuses {
		t.Run(on.name, func(t *testing.T) {
			nodes := on.start(t, &bus.Options{Limits: bus.Limits{MaxIdempotencyKeysPerIdentity: 3}})
			srv, other := nodes[0], nodes[len(nodes)-1]
			for i := range 3 {
				a := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, map[string]string{"Idempotency-Key": fmt.Sprint("k", i)})
				require.Equal(t, 201, a.status, string(a.body))
			}
			a := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, map[string]string{"Idempotency-Key": "k3"})
			require.Equal(t, 429, a.status, string(a.body))
			require.EqualValues(t, protocol.CodeLimitReached, a.errorCode())
			require.Contains(t, string(a.body), "max_idempotency_keys_per_identity")
			require.Contains(t, string(a.body), "retry_after_ms")
			require.NotEmpty(t, a.header.Get("Retry-After"))
			waitKeys(t, other, "http", 3)
			// A key it holds is still answered.
			a = httpDo(t, other, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, map[string]string{"Idempotency-Key": "k0"})
			require.Equal(t, 201, a.status, string(a.body))
			require.Equal(t, "true", a.header.Get("Idempotent-Replayed"))
			// The same identity over WebSocket meets the same cap.
			c := bustest.Connect(t, other.URL, "http", nil)
			r := c.Call(protocol.MethodSendMessage, map[string]any{"topic": "jobs:a", "payload": map[string]any{"type": "t"}, "meta": map[string]any{"idempotency_key": "k4"}})
			requireCode(t, r, protocol.CodeLimitReached, "max_idempotency_keys_per_identity")
			refused := refusals(t, srv, "max_idempotency_keys_per_identity")
			if other != srv {
				refused += refusals(t, other, "max_idempotency_keys_per_identity")
			}
			require.Equal(t, 2.0, refused)
		})
	}
}

// TestInvalidUTF8RefusedByEveryDoor (reproduction 2): a message that is
// not valid UTF-8 is refused by the HTTP API and by a tool's callback
// with 400 naming the byte, and reaches no subscriber.
func TestInvalidUTF8RefusedByEveryDoor(t *testing.T) {
	t.Parallel()
	o := &bus.Options{}
	withToolSubs(o, toolsub.Options{})
	srv := bustest.Start(t, o)
	_, got := bustest.Collect(t, srv.URL, "strict", "jobs:*")
	body := `{"topic":"jobs:a","payload":{"type":"t","x":"` + "\xff\xfe" + `"}}`
	a := httpDo(t, srv, "POST", "/v1/messages", body, nil)
	require.Equal(t, 400, a.status, string(a.body))
	require.EqualValues(t, protocol.CodeParseError, a.errorCode())
	require.Contains(t, string(a.body), fmt.Sprintf("byte %d", strings.Index(body, "\xff")))

	// A tool's callback.
	owner := bustest.Connect(t, srv.URL, "owner", nil)
	var start protocol.ToolSubscriptionStartResult
	owner.MustCall(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "g", ToolCallID: "c", Topic: "jobs:events"}, &start)
	event := `{"type":"subscription_event","group_id":"g","tool_call_id":"c","data":{"x":"` + "caf\xe9" + `"}}`
	a = httpDo(t, srv, "POST", start.CallbackPath, event, nil)
	require.Equal(t, 400, a.status, string(a.body))
	require.Contains(t, string(a.body), fmt.Sprintf("byte %d", strings.Index(event, "\xe9")))

	// Nothing reached the subscriber: the next message is the first.
	good := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"good"}}`, nil)
	require.Equal(t, 201, good.status, string(good.body))
	d := <-got
	require.Equal(t, good.messageID(t), d.MessageID)
}

// TestLimitsPerIdentity (reproduction 5): an identity's rate holds
// across the clientIds and connections it publishes as, and its
// connections are capped whatever address and clientId they use; each
// refusal names its limit.
func TestLimitsPerIdentity(t *testing.T) {
	t.Parallel()
	srv := doorsAuth(t, bus.Limits{MaxConnectionsPerIdentity: 3, MaxStreamsPerIdentity: 2})
	accepted := 0
	for i := range 20 {
		body := fmt.Sprintf(`{"topic":"jobs:a","payload":{"type":"t"},"clientId":"slow-%d"}`, i)
		a := httpDo(t, srv, "POST", "/v1/messages", body, bearerHeader("slow-token"))
		switch a.status {
		case 201:
			accepted++
		case 429:
			require.EqualValues(t, protocol.CodeRateLimited, a.errorCode(), string(a.body))
			require.Contains(t, string(a.body), "publish_rate")
		default:
			t.Fatalf("publish %d: %d %s", i, a.status, a.body)
		}
	}
	require.Equal(t, 5, accepted, "a new clientId per request shares its identity's bucket of 5")

	// Its WebSocket connections share the same bucket, emptied above.
	var conns []*bustest.Client
	for i := range 3 {
		c, code := initialize(t, srv.URL, "slow-token", fmt.Sprint("slow-ws-", i), false)
		require.Zero(t, code)
		conns = append(conns, c)
	}
	r := conns[2].Call(protocol.MethodSendMessage, map[string]any{"topic": "jobs:a", "payload": map[string]any{"type": "t"}})
	requireCode(t, r, protocol.CodeRateLimited, "publish_rate")
	// A fourth connection of the identity is refused at initialize.
	c := bustest.DialToken(t, srv.URL, "slow-token")
	r = c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "slow-ws-3"})
	requireCode(t, r, protocol.CodeLimitReached, `max_connections_per_identity: identity "slow" holds 3 connections`)
	// One closing gives its place back.
	require.NoError(t, conns[0].WS.Close(websocket.StatusNormalClosure, ""))
	var last *protocol.Error
	require.Eventually(t, func() bool {
		c := bustest.DialToken(t, srv.URL, "slow-token")
		last = c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "slow-ws-4"}).Error
		return last == nil
	}, bustest.Timeout, 10*time.Millisecond, "a closed connection's place is given back; last answer %v", &last)

	// A grant's own cap comes before the bus's.
	_, code := initialize(t, srv.URL, "sub-token", "bob-sub-1", false)
	require.Zero(t, code)
	c = bustest.DialToken(t, srv.URL, "sub-token")
	requireCode(t, c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "bob-sub-2"}), protocol.CodeLimitReached, `identity "bob-sub" holds 1 connections, its limit 1`)

	// Its journal streams, from however many requests.
	stream := func() *http.Response {
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.HTTP.URL+journal.PathEventsStream, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer slow-token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	require.Equal(t, http.StatusOK, stream().StatusCode)
	require.Equal(t, http.StatusOK, stream().StatusCode)
	third := stream()
	body, _ := io.ReadAll(third.Body)
	require.Equal(t, http.StatusTooManyRequests, third.StatusCode, string(body))
	require.Contains(t, string(body), `max_streams_per_identity: identity \"slow\" holds 2 event streams`)
}

// TestFrameHeaderTooBig (reproduction 6): a frame whose header declares
// more bytes than the read limit is refused with 1009 as soon as the
// header is read; the peer sending no payload was held until the ping
// timeout.
func TestFrameHeaderTooBig(t *testing.T) {
	t.Parallel()
	srv := bustest.Start(t, nil)
	c := rawConn(t, srv, strings.Replace(upgradeBodied, "Content-Length: 1000\r\n", "", 1))
	r := bufio.NewReader(c)
	require.Equal(t, http.StatusSwitchingProtocols, readResponse(t, c, r).StatusCode)
	// A masked text frame of 2^62 bytes, and not one of them.
	header := []byte{0x81, 0x80 | 127}
	header = binary.BigEndian.AppendUint64(header, 1<<62)
	header = append(header, 1, 2, 3, 4)
	_, err := c.Write(header)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(bustest.Timeout)))
	frame := make([]byte, 4)
	_, err = io.ReadFull(r, frame)
	require.NoError(t, err, "no close frame within %s (the ping timeout is longer)", bustest.Timeout)
	require.Equal(t, byte(0x88), frame[0], "a close frame")
	require.Equal(t, uint16(websocket.StatusMessageTooBig), binary.BigEndian.Uint16(frame[2:]))
	requireClosedByBus(t, c, r)
}

// TestHTTPErrorsInHTTPTerms (issue 37, item 6): the HTTP API's refusals
// name the header to send and the body's field to set, not the
// WebSocket upgrade and initialize.
func TestHTTPErrorsInHTTPTerms(t *testing.T) {
	t.Parallel()
	srv := doorsAuth(t, bus.Limits{})
	body := `{"topic":"jobs:a","payload":{"type":"t"}}`
	for name, tc := range map[string]struct {
		header map[string]string
		body   string
		status int
		want   string
	}{
		"no token":        {nil, body, 401, "send the header Authorization: Bearer TOKEN"},
		"wrong token":     {bearerHeader("nope"), body, 401, "credential not accepted (unknown, expired or revoked); send the header Authorization: Bearer TOKEN"},
		"no clientId":     {bearerHeader("slow-token"), body, 403, `may not publish as "slow", the credential's name (the body has no "clientId"): its grant's client_ids (slow-*) do not allow it; set "clientId" in the body`},
		"wrong clientId":  {bearerHeader("slow-token"), `{"topic":"jobs:a","payload":{"type":"t"},"clientId":"fast"}`, 403, `the body's "clientId" "fast"`},
		"journal, no one": {nil, "", 401, "send the header Authorization: Bearer TOKEN"},
	} {
		method, path := "POST", "/v1/messages"
		if tc.body == "" {
			method, path = "GET", "/v1/events"
		}
		a := httpDo(t, srv, method, path, tc.body, tc.header)
		require.Equal(t, tc.status, a.status, "%s: %s", name, a.body)
		var answer struct{ Error protocol.Error }
		require.NoError(t, json.Unmarshal(a.body, &answer), name)
		require.Contains(t, answer.Error.Message, tc.want, name)
		require.NotContains(t, answer.Error.Message, "initialize", name)
		require.NotContains(t, answer.Error.Message, "upgrade", name)
	}
}
