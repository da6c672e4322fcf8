package bus_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/console"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/protocol"
)

// doorBus starts a bus for one probe of TestDoorPromises, with auth:
// "door" publishes and subscribes jobs:* and held:* as door-*, "rated"
// publishes jobs:* at one message per 1000 s as rated-*, "root" is an
// admin and "viewer" is not. Its github hook gh publishes the body on
// jobs:gh:{kind}. tune changes the options.
func doorBus(t *testing.T, tune func(*bus.Options)) *bustest.Server {
	t.Helper()
	rules := auth.Rules{Allow: []string{"jobs:*", "held:*"}}
	a, err := auth.New(auth.Config{Identities: []auth.Identity{
		{Name: "door", TokenSHA256: authtest.SHA256("door-token"), Grant: auth.Grant{ClientIDs: []string{"door-*"}, Publish: rules, Subscribe: rules}},
		{Name: "rated", TokenSHA256: authtest.SHA256("rated-token"), Grant: auth.Grant{ClientIDs: []string{"rated-*"},
			Publish: auth.Rules{Allow: []string{"jobs:*"}}, Rate: auth.Rate{PerSecond: 0.001, Burst: 1}}},
		{Name: "root", TokenSHA256: authtest.SHA256("root-token"), Grant: auth.Grant{ClientIDs: []string{"root"}, Admin: true}},
		{Name: "viewer", TokenSHA256: authtest.SHA256("viewer-token"), Grant: auth.Grant{ClientIDs: []string{"viewer"}, Subscribe: rules}},
	}}, t.TempDir())
	require.NoError(t, err)
	jn := journal.New(nil)
	o := &bus.Options{Auth: a, HoldPatterns: []string{"held:*"}, Extensions: []bus.Extension{hookGH("jobs:gh:{kind}"), jn, console.Extension{Journal: jn}}}
	tools := false
	if tune != nil {
		before := len(o.Extensions)
		tune(o)
		// A tune that adds extensions brings the tool subscriptions' own
		// (rate/tool_callback); one that replaces them has none.
		tools = len(o.Extensions) > before
	}
	if !tools {
		withToolSubs(o, toolsub.Options{})
	}
	return bustest.Start(t, o)
}

// hookGH is the webhooks of a bus with one github hook, gh, that
// publishes on topic.
func hookGH(topic string) bus.Extension {
	return webhook.New(webhook.Options{Hooks: []webhook.Hook{{Name: "gh", Scheme: webhook.SchemeGitHub, Secret: []byte("gh"), Topic: topic}}})
}

// browser is a browser of the console of srv: its cookies.
type browser struct {
	t    *testing.T
	srv  *bustest.Server
	http *http.Client
}

func newBrowser(t *testing.T, srv *bustest.Server) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, srv: srv, http: &http.Client{Jar: jar}}
}

// login logs in to the console with token.
func (b *browser) login(token string) httpAnswer {
	return b.answer(b.http.Post(b.srv.HTTP.URL+"/console/api/login", "application/json", strings.NewReader(fmt.Sprintf(`{"token": %q}`, token))))
}

// get reads path with the session's cookie.
func (b *browser) get(path string) httpAnswer {
	return b.answer(b.http.Get(b.srv.HTTP.URL + path))
}

func (b *browser) answer(resp *http.Response, err error) httpAnswer {
	b.t.Helper()
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return httpAnswer{status: resp.StatusCode, header: resp.Header, body: body}
}

// doorPeer is a peer of doorBus initialized as door-{n}.
func doorPeer(t *testing.T, srv *bustest.Server, token, clientID string) *bustest.Client {
	t.Helper()
	c, code := initialize(t, srv.URL, token, clientID, false)
	require.Zero(t, code, "initialize %s", clientID)
	return c
}

// send publishes payload (JSON) on topic over c.
func send(c *bustest.Client, topic, payload string, meta map[string]any) bustest.Response {
	params := map[string]any{"topic": topic, "payload": jsonRaw(payload)}
	if meta != nil {
		params["meta"] = meta
	}
	return c.Call(protocol.MethodSendMessage, params)
}

// jsonRaw is s as a JSON value, written as it is.
type jsonRaw string

func (j jsonRaw) MarshalJSON() ([]byte, error) { return []byte(j), nil }

// post POSTs body to path. Not httpDo: the probes' answers are not the
// HTTP tests' that TestHTTPOpenAPIMatchesHandlers compares with the
// OpenAPI document (a 503 from the connection limit comes before any
// handler).
func post(t *testing.T, srv *bustest.Server, path, body string, header map[string]string) httpAnswer {
	t.Helper()
	status, h, b := bustest.Post(t, srv.HTTP.URL+path, body, header)
	return httpAnswer{status: status, header: h, body: b}
}

// postMessage POSTs sendMessage's params to /v1/messages as door.
func postMessage(t *testing.T, srv *bustest.Server, body string, header map[string]string) httpAnswer {
	t.Helper()
	// The grant allows door-*, not the credential's name.
	body = strings.Replace(body, `{"topic"`, `{"clientId":"door-1","topic"`, 1)
	h := bearerHeader("door-token")
	for k, v := range header {
		h[k] = v
	}
	return post(t, srv, "/v1/messages", body, h)
}

// postHook POSTs body to hook gh, signed, with delivery id.
func postHook(t *testing.T, srv *bustest.Server, body, delivery string) httpAnswer {
	t.Helper()
	return post(t, srv, "/v1/hooks/gh", body, map[string]string{
		"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("gh", body), "X-GitHub-Event": "push", "X-GitHub-Delivery": delivery,
	})
}

// toolCallback starts a tool subscription of door-owner on topic and
// returns its callback path.
func toolCallback(t *testing.T, srv *bustest.Server, topic string) string {
	t.Helper()
	owner := doorPeer(t, srv, "door-token", "door-owner")
	var start protocol.ToolSubscriptionStartResult
	owner.MustCall(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "g", ToolCallID: "c", Topic: topic}, &start)
	return start.CallbackPath
}

// toolEvent is a subscription_event of toolCallback's subscription with
// data.
func toolEvent(data string) string {
	return `{"type":"subscription_event","group_id":"g","tool_call_id":"c","text":"t","data":` + data + `}`
}

// requireHTTP checks a's status and that its error's message (or its
// body, when it is no JSON error) says want.
func requireHTTP(t *testing.T, a httpAnswer, status int, want string) {
	t.Helper()
	require.Equal(t, status, a.status, string(a.body))
	var answer struct{ Error *protocol.Error }
	if json.Unmarshal(a.body, &answer) == nil && answer.Error != nil {
		require.Contains(t, answer.Error.Message, want)
		return
	}
	require.Contains(t, string(a.body), want)
}

// deepJSON is a JSON array nested deeper than encoding/json's 10000.
var deepJSON = strings.Repeat("[", 10001) + strings.Repeat("]", 10001)

// notUTF8 is a JSON string with a byte that is not UTF-8.
const notUTF8 = `"caf` + "\xe9" + `"`

// overPerAddr checks that the bus, holding one connection of the
// address at its per-address limit of one, answers a request to path
// 503 naming the limit.
func overPerAddr(path string) func(t *testing.T) {
	return func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.Limits.MaxConnectionsPerAddr = 1; o.Limits.HandshakeTimeout = time.Hour })
		rawConn(t, srv, "")
		require.Eventually(t, func() bool { return metric(t, srv, "bub_connections_open", "") == 1 }, bustest.Timeout, time.Millisecond)
		requireHTTP(t, post(t, srv, path, `{}`, nil), http.StatusServiceUnavailable, "max_connections_per_addr")
	}
}

// doorProbes are TestDoorPromises' probes by check and door: each makes
// the bus refuse what its cell of SECURITY.md's table says.
var doorProbes = map[string]func(t *testing.T){
	"credential/WebSocket": func(t *testing.T) {
		srv := doorBus(t, nil)
		_, err := bustest.DialWS(srv.URL, "wrong-token")
		require.ErrorContains(t, err, "HTTP 401", "a wrong token on the upgrade")
		c := bustest.Dial(t, srv.URL)
		r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "door-1", Token: "wrong-token"})
		requireCode(t, r, protocol.CodeUnauthorized, "credential not accepted")
	},
	"credential/HTTP": func(t *testing.T) {
		requireHTTP(t, post(t, doorBus(t, nil), "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, nil), 401, "Authorization: Bearer TOKEN")
	},
	"credential/webhook in": func(t *testing.T) {
		a := post(t, doorBus(t, nil), "/v1/hooks/gh", `{"kind":"a"}`, map[string]string{"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("wrong", `{"kind":"a"}`)})
		requireHTTP(t, a, 401, "signature")
	},
	"credential/tool callback": func(t *testing.T) {
		requireHTTP(t, post(t, doorBus(t, nil), protocol.PathCallbacks+"guessed", toolEvent(`{}`), nil), 404, "no active tool subscription")
	},
	"credential/console": func(t *testing.T) {
		require.Equal(t, 401, newBrowser(t, doorBus(t, nil)).login("wrong-token").status)
	},

	"utf8/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, nil), "door-token", "door-1")
		c.Send(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"jobs:a","payload":{"type":"t","x":` + notUTF8 + `}}}`)
		require.Equal(t, websocket.StatusInvalidFramePayloadData, c.Closed())
	},
	"utf8/HTTP": func(t *testing.T) {
		requireHTTP(t, postMessage(t, doorBus(t, nil), `{"topic":"jobs:a","payload":{"type":"t","x":`+notUTF8+`}}`, nil), 400, "not valid UTF-8: byte ")
	},
	"utf8/webhook in": func(t *testing.T) {
		requireHTTP(t, postHook(t, doorBus(t, nil), `{"kind":`+notUTF8+`}`, "d-1"), 400, "not valid UTF-8: byte ")
	},
	"utf8/tool callback": func(t *testing.T) {
		srv := doorBus(t, nil)
		requireHTTP(t, post(t, srv, toolCallback(t, srv, "jobs:events"), toolEvent(`{"x":`+notUTF8+`}`), nil), 400, "not valid UTF-8: byte ")
	},

	"size/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, func(o *bus.Options) { o.MaxMessageBytes = 4096 }), "door-token", "door-1")
		c.Send(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"jobs:a","payload":{"type":"t","x":"` + strings.Repeat("x", 5000) + `"}}}`)
		require.Equal(t, websocket.StatusMessageTooBig, c.Closed())
	},
	"size/HTTP": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.MaxMessageBytes = 4096 })
		requireHTTP(t, postMessage(t, srv, `{"topic":"jobs:a","payload":{"type":"t","x":"`+strings.Repeat("x", 5000)+`"}}`, nil), 413, "4096")
	},
	"size/webhook in": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.MaxMessageBytes = 4096 })
		requireHTTP(t, postHook(t, srv, `{"kind":"a","x":"`+strings.Repeat("x", 5000)+`"}`, "d-1"), 413, "4096")
	},
	"size/tool callback": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.MaxMessageBytes = 4096 })
		requireHTTP(t, post(t, srv, toolCallback(t, srv, "jobs:events"), toolEvent(`"`+strings.Repeat("x", 5000)+`"`), nil), 413, "4096")
	},

	"depth/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, nil), "door-token", "door-1")
		c.Send(`{"jsonrpc":"2.0","id":1,"method":"sendMessage","params":{"topic":"jobs:a","payload":{"type":"t","x":` + deepJSON + `}}}`)
		require.EqualValues(t, protocol.CodeParseError, code(c.RecvResponse()))
	},
	"depth/HTTP": func(t *testing.T) {
		requireHTTP(t, postMessage(t, doorBus(t, nil), `{"topic":"jobs:a","payload":{"type":"t","x":`+deepJSON+`}}`, nil), 400, "not valid JSON")
	},
	"depth/webhook in": func(t *testing.T) {
		requireHTTP(t, postHook(t, doorBus(t, nil), `{"kind":"a","x":`+deepJSON+`}`, "d-1"), 400, "not JSON")
	},
	"depth/tool callback": func(t *testing.T) {
		srv := doorBus(t, nil)
		requireHTTP(t, post(t, srv, toolCallback(t, srv, "jobs:events"), toolEvent(deepJSON), nil), 400, "not valid JSON")
	},

	"topic/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, nil), "door-token", "door-1")
		require.EqualValues(t, protocol.CodeInvalidParams, code(send(c, "jobs:a b", `{"type":"t"}`, nil)))
	},
	"topic/HTTP": func(t *testing.T) {
		requireHTTP(t, postMessage(t, doorBus(t, nil), `{"topic":"jobs:a b","payload":{"type":"t"}}`, nil), 400, "topic")
	},
	"topic/webhook in": func(t *testing.T) {
		srv := bustest.Start(t, &bus.Options{Extensions: []bus.Extension{hookGH("jobs:gh:{kind}")}})
		_, got := bustest.Collect(t, srv.URL, "sink", "jobs:*")
		require.Equal(t, 201, postHook(t, srv, `{"kind":"a*\u0000"}`, "d-1").status)
		require.Equal(t, "jobs:gh:a__", (<-got).Topic, "the field's pattern and control characters are replaced")
	},
	"topic/tool callback": func(t *testing.T) {
		owner := doorPeer(t, doorBus(t, nil), "door-token", "door-owner")
		r := owner.Call(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "g", ToolCallID: "c", Topic: "jobs:a b"})
		require.EqualValues(t, protocol.CodeInvalidParams, code(r))
	},

	"grant/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, nil), "door-token", "door-1")
		require.EqualValues(t, protocol.CodeForbidden, code(send(c, "other:a", `{"type":"t"}`, nil)))
	},
	"grant/HTTP": func(t *testing.T) {
		requireHTTP(t, postMessage(t, doorBus(t, nil), `{"topic":"other:a","payload":{"type":"t"}}`, nil), 403, `may not publish to "other:a"`)
	},
	"grant/webhook in": func(t *testing.T) {
		_, err := bus.New(&bus.Options{Extensions: []bus.Extension{webhook.New(webhook.Options{Hooks: []webhook.Hook{{Name: "x", Scheme: webhook.SchemeNone, Insecure: true, Topic: "system:client.{kind}"}}})}})
		require.ErrorContains(t, err, "the system: topics are the bus's own")
	},
	"grant/tool callback": func(t *testing.T) {
		owner := doorPeer(t, doorBus(t, nil), "door-token", "door-owner")
		r := owner.Call(protocol.MethodToolSubscriptionStart, protocol.ToolSubscriptionStartParams{GroupID: "g", ToolCallID: "c", Topic: "other:a"})
		require.EqualValues(t, protocol.CodeForbidden, code(r))
	},
	"grant/console": func(t *testing.T) {
		c := newBrowser(t, doorBus(t, nil))
		require.Equal(t, 200, c.login("viewer-token").status)
		require.Equal(t, 403, c.get("/console/api/clients").status)
	},

	"rate/WebSocket": func(t *testing.T) {
		srv := doorBus(t, nil)
		require.Nil(t, send(doorPeer(t, srv, "rated-token", "rated-1"), "jobs:a", `{"type":"t"}`, nil).Error)
		requireCode(t, send(doorPeer(t, srv, "rated-token", "rated-2"), "jobs:a", `{"type":"t"}`, nil), protocol.CodeRateLimited, "publish_rate")
	},
	"rate/HTTP": func(t *testing.T) {
		srv := doorBus(t, nil)
		for i, want := range []int{201, 429} {
			a := post(t, srv, "/v1/messages", fmt.Sprintf(`{"topic":"jobs:a","payload":{"type":"t"},"clientId":"rated-%d"}`, i), bearerHeader("rated-token"))
			require.Equal(t, want, a.status, string(a.body))
			if want == 429 {
				require.NotEmpty(t, a.header.Get("Retry-After"))
			}
		}
	},
	"rate/tool callback": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { withToolSubs(o, toolsub.Options{EventRate: 0.001, EventBurst: 1}) })
		path := toolCallback(t, srv, "jobs:events")
		require.Equal(t, 200, post(t, srv, path, toolEvent(`{}`), nil).status)
		requireHTTP(t, post(t, srv, path, toolEvent(`{}`), nil), 429, "--tool-event-rate")
	},
	"rate/console": func(t *testing.T) {
		c := newBrowser(t, doorBus(t, nil))
		a := c.login("wrong-token")
		for n := 1; a.status == 401 && n < 30; n++ {
			a = c.login("wrong-token")
		}
		require.Equal(t, 429, a.status, string(a.body))
		require.NotEmpty(t, a.header.Get("Retry-After"))
	},

	"quota/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, func(o *bus.Options) { o.Limits.MaxPendingPerIdentity = 1 }), "door-token", "door-1")
		require.Nil(t, send(c, "held:a", `{"type":"t"}`, nil).Error)
		requireCode(t, send(c, "held:a", `{"type":"t"}`, nil), protocol.CodeLimitReached, "max_pending_per_identity")
	},
	"quota/HTTP": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.Limits.MaxPendingPerIdentity = 1 })
		body := `{"topic":"held:a","payload":{"type":"t"}}`
		require.Equal(t, 201, postMessage(t, srv, body, nil).status)
		requireHTTP(t, postMessage(t, srv, body, nil), 429, "max_pending_per_identity")
	},
	"quota/webhook in": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) {
			o.Limits.MaxPendingPerIdentity = 1
			o.Extensions = []bus.Extension{hookGH("held:gh:{kind}")}
		})
		require.Equal(t, 201, postHook(t, srv, `{"kind":"a"}`, "d-1").status)
		requireHTTP(t, postHook(t, srv, `{"kind":"b"}`, "d-2"), 429, `identity "bub-hook-gh" holds`)
	},
	"quota/tool callback": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.Limits.MaxPendingPerIdentity = 1 })
		path := toolCallback(t, srv, "held:events")
		require.Equal(t, 200, post(t, srv, path, toolEvent(`{"n":1}`), nil).status)
		requireHTTP(t, post(t, srv, path, toolEvent(`{"n":2}`), nil), 429, `identity "door" holds`)
	},

	"idempotency/WebSocket": func(t *testing.T) {
		c := doorPeer(t, doorBus(t, func(o *bus.Options) { o.Limits.MaxIdempotencyKeysPerIdentity = 1 }), "door-token", "door-1")
		require.Nil(t, send(c, "jobs:a", `{"type":"t"}`, map[string]any{"idempotency_key": "k1"}).Error)
		requireCode(t, send(c, "jobs:a", `{"type":"t"}`, map[string]any{"idempotency_key": "k2"}), protocol.CodeLimitReached, "max_idempotency_keys_per_identity")
	},
	"idempotency/HTTP": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.Limits.MaxIdempotencyKeysPerIdentity = 1 })
		key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
		require.Equal(t, 201, postMessage(t, srv, `{"topic":"jobs:a","payload":{"type":"t"}}`, key("k1")).status)
		requireHTTP(t, postMessage(t, srv, `{"topic":"jobs:b","payload":{"type":"t"}}`, key("k1")), 409, "another request")
		requireHTTP(t, postMessage(t, srv, `{"topic":"jobs:a","payload":{"type":"t"}}`, key("k2")), 429, "max_idempotency_keys_per_identity")
	},
	"idempotency/webhook in": func(t *testing.T) {
		srv := doorBus(t, nil)
		require.Equal(t, 201, postHook(t, srv, `{"kind":"a"}`, "d-1").status)
		requireHTTP(t, postHook(t, srv, `{"kind":"a"}`, "d-2"), 409, "a replay")
	},

	"connections/WebSocket": func(t *testing.T) {
		srv := doorBus(t, func(o *bus.Options) { o.Limits.MaxConnectionsPerIdentity = 1 })
		doorPeer(t, srv, "door-token", "door-1")
		c := bustest.DialToken(t, srv.URL, "door-token")
		requireCode(t, c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "door-2"}), protocol.CodeLimitReached, "max_connections_per_identity")
	},
	"connections/HTTP":          overPerAddr("/v1/messages"),
	"connections/webhook in":    overPerAddr("/v1/hooks/gh"),
	"connections/tool callback": overPerAddr(protocol.PathCallbacks + "x"),
	"connections/console": func(t *testing.T) {
		srv := doorBus(t, nil)
		var sessions []*browser
		for range 9 {
			c := newBrowser(t, srv)
			require.Equal(t, 200, c.login("viewer-token").status)
			sessions = append(sessions, c)
		}
		require.Equal(t, 401, sessions[0].get("/console/api/session").status, "the ninth session ended the identity's first")
	},
}

// TestDoorPromises replays SECURITY.md's table of the promises of each
// door: every cell that does not begin with "—" has a probe here, which makes a bus
// refuse what the cell says; the MCP column is the WebSocket one, the
// bridge being a peer; and no probe is left without its cell.
func TestDoorPromises(t *testing.T) {
	data, err := os.ReadFile("../docs/SECURITY.md")
	require.NoError(t, err)
	const head = "| check | WebSocket | HTTP | webhook in | tool callback | MCP | console |\n|---|---|---|---|---|---|---|\n"
	_, table, ok := strings.Cut(string(data), head)
	require.True(t, ok, "SECURITY.md: no table of the doors' promises")
	doors := strings.Split(strings.Trim(strings.TrimSuffix(head[:strings.Index(head, "\n")], " |"), "| "), " | ")[1:]
	row := regexp.MustCompile("^\\| `([a-z0-9]+)` \\| (.*) \\|$")
	cited := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		cells := strings.Split(m[2], " | ")
		require.Len(t, cells, len(doors), "SECURITY.md: row %s", m[1])
		for i, cell := range cells {
			door := doors[i]
			if door == "MCP" {
				require.Equal(t, "as WebSocket", cell, "row %s: the MCP bridge is a peer", m[1])
				require.NotEqual(t, "—", cells[0], "row %s: MCP as WebSocket, which applies nothing", m[1])
				continue
			}
			if strings.HasPrefix(cell, "—") {
				continue // no promise, perhaps with why
			}
			key := m[1] + "/" + door
			cited[key] = true
			probe := doorProbes[key]
			if probe == nil {
				t.Errorf("SECURITY.md promises %q for %s, and no probe checks it", cell, key)
				continue
			}
			t.Run(key, func(t *testing.T) {
				t.Parallel()
				probe(t)
			})
		}
	}
	require.NotEmpty(t, cited, "SECURITY.md: the doors' table has no rows")
	for key := range doorProbes {
		if !cited[key] {
			t.Errorf("probe %s checks a promise SECURITY.md's table does not make", key)
		}
	}
}
