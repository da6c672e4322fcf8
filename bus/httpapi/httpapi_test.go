package httpapi_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/httpapi"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// httpSeen records every path, method and status the HTTP API answered
// in this package's tests, for TestHTTPOpenAPIMatchesHandlers.
var httpSeen = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// httpAnswer is an HTTP API answer, read whole.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode is the JSON-RPC code of an error answer, 0 for another.
func (a httpAnswer) errorCode() int64 {
	var e struct {
		Error *protocol.Error `json:"error"`
	}
	if json.Unmarshal(a.body, &e) != nil || e.Error == nil {
		return 0
	}
	return e.Error.Code
}

// messageID is the messageId of a 201 (bustest.Answer's).
func (a httpAnswer) messageID(t *testing.T) string {
	t.Helper()
	return bustest.Answer{Status: a.status, Body: a.body}.MessageID(t)
}

// httpDo sends a request to srv over real HTTP and records what path,
// method and status it got.
func httpDo(t *testing.T, srv *bustest.Server, method, target, body string, header map[string]string) httpAnswer {
	t.Helper()
	a := bustest.Do(t, method, srv.HTTP.URL+target, body, header)
	status, h, b := a.Status, a.Header, a.Body
	path, _, _ := strings.Cut(target, "?")
	httpSeen.Lock()
	httpSeen.m[fmt.Sprintf("%s %s %d", path, strings.ToLower(method), status)] = true
	httpSeen.Unlock()
	return httpAnswer{status: status, header: h, body: b}
}

func bearerHeader(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// startAuth starts a bus with auth: main publishes agent:* as main, ops
// (an admin) inbound:* as ops-*, tool inbound:* as tool, publish-only.
func startAuth(t *testing.T) *bustest.Server {
	t.Helper()
	a, err := auth.New(auth.Config{Identities: []auth.Identity{
		{Name: "main", TokenSHA256: authtest.SHA256("main-token"), Grant: auth.Grant{
			ClientIDs: []string{"main"},
			Publish:   auth.Rules{Allow: []string{"bcp:*", "outbound:*", "agent:*"}},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "inbound:*"}},
		}},
		{Name: "ops", TokenSHA256: authtest.SHA256("ops-token"), Grant: auth.Grant{
			ClientIDs: []string{"ops-*"},
			Publish:   auth.Rules{Allow: []string{"inbound:*", "jobs:"}, Deny: []string{"inbound:secret-*"}},
			Admin:     true,
		}},
		{Name: "tool", TokenSHA256: authtest.SHA256("tool-token"), Grant: auth.Grant{
			ClientIDs:   []string{"tool"},
			Publish:     auth.Rules{Allow: []string{"inbound:*"}},
			PublishOnly: true,
		}},
	}}, t.TempDir())
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	return bustest.Start(t, &bus.Options{Auth: a})
}

// TestHTTPPublishStatuses checks every answer of POST /v1/messages on a
// bus with auth: each refusal has the WebSocket API's code and its HTTP
// status, and an accepted message reaches its subscriber.
func TestHTTPPublishStatuses(t *testing.T) {
	srv := startAuth(t)
	main := bustest.DialToken(t, srv.URL, "main-token")
	main.OnProcess(bustest.Processed)
	main.Initialize("main")
	main.Subscribe("agent:main", protocol.PolicyContinueAll)

	big := `{"topic":"inbound:x","payload":{"type":"` + strings.Repeat("a", 1<<20) + `"}}`
	tests := []struct {
		name   string
		method string
		target string
		body   string
		header map[string]string
		status int
		code   int64
	}{
		{"accepted, no subscriber", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"n","n":1}}`, bearerHeader("tool-token"), 201, 0},
		{"accepted, waits for acks", "POST", "/v1/messages?wait=ack", `{"topic":"agent:main","payload":{"type":"t"}}`, bearerHeader("main-token"), 201, 0},
		{"clientId the grant allows", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"},"clientId":"ops-1"}`, bearerHeader("ops-token"), 201, 0},
		{"not JSON", "POST", "/v1/messages", `{"topic":`, bearerHeader("tool-token"), 400, protocol.CodeParseError},
		{"not an object", "POST", "/v1/messages", `[1]`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"no topic", "POST", "/v1/messages", `{"payload":{"type":"t"}}`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"bad topic", "POST", "/v1/messages", `{"topic":"a b","payload":{"type":"t"}}`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"no payload type", "POST", "/v1/messages", `{"topic":"inbound:x","payload":1}`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"meta not an object", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"},"meta":3}`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"bad idempotency key", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, map[string]string{"Authorization": "Bearer tool-token", "Idempotency-Key": strings.Repeat("k", 256)}, 400, protocol.CodeInvalidParams},
		{"clientId not a string", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"},"clientId":7}`, bearerHeader("tool-token"), 400, protocol.CodeInvalidParams},
		{"no credential", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, nil, 401, protocol.CodeUnauthorized},
		{"wrong token", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, bearerHeader("nope"), 401, protocol.CodeUnauthorized},
		{"not a bearer", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, map[string]string{"Authorization": "Basic dG9vbDp4"}, 401, protocol.CodeUnauthorized},
		{"topic not granted", "POST", "/v1/messages", `{"topic":"bcp:x","payload":{"type":"t"}}`, bearerHeader("tool-token"), 403, protocol.CodeForbidden},
		{"bus's own topic", "POST", "/v1/messages", `{"topic":"system:x","payload":{"type":"t"}}`, bearerHeader("ops-token"), 403, protocol.CodeForbidden},
		{"clientId not granted", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"},"clientId":"main"}`, bearerHeader("tool-token"), 403, protocol.CodeForbidden},
		{"cross-site origin", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, map[string]string{"Authorization": "Bearer tool-token", "Origin": "https://evil.example"}, 403, protocol.CodeForbidden},
		{"rebound host", "POST", "/v1/messages", `{"topic":"inbound:x","payload":{"type":"t"}}`, map[string]string{"Authorization": "Bearer tool-token", "Origin": "http://evil.example", "Host": "evil.example"}, 403, protocol.CodeForbidden},
		{"GET", "GET", "/v1/messages", "", bearerHeader("tool-token"), 405, protocol.CodeMethodNotFound},
		{"too big", "POST", "/v1/messages", big, bearerHeader("tool-token"), 413, protocol.CodeLimitReached},
		{"openapi", "GET", "/v1/openapi.json", "", nil, 200, 0},
		{"openapi POST", "POST", "/v1/openapi.json", "", nil, 405, protocol.CodeMethodNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := httpDo(t, srv, tt.method, tt.target, tt.body, tt.header)
			if a.status != tt.status || a.errorCode() != tt.code {
				t.Fatalf("got %d %s; want %d with code %d", a.status, a.body, tt.status, tt.code)
			}
			if tt.status == 201 {
				a.messageID(t)
			}
			if tt.status == 401 && a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}
}

// TestHTTPPublishWaitAck checks that ?wait=ack answers with
// sendMessage's result, the subscriber's ack in it, and that the message
// comes from the credential's clientId.
func TestHTTPPublishWaitAck(t *testing.T) {
	srv := bustest.Start(t, nil)
	_, got := bustest.Collect(t, srv.URL, "worker", "jobs:*")
	a := httpDo(t, srv, "POST", "/v1/messages?wait=ack", `{"topic":"jobs:a","payload":{"type":"n","n":1},"clientId":"cron"}`, nil)
	if a.status != 201 {
		t.Fatalf("got %d %s", a.status, a.body)
	}
	var r struct {
		MessageID string                      `json:"messageId"`
		Result    *protocol.SendMessageResult `json:"result"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil || r.Result == nil || len(r.Result.Acks) != 1 || !r.Result.Acks[0].Processed {
		t.Fatalf("answer %s: want one processed ack (%v)", a.body, err)
	}
	d := <-got
	if d.MessageID != r.MessageID || d.From != "cron" {
		t.Fatalf("delivered %s from %q; want %s from cron", d.MessageID, d.From, r.MessageID)
	}
}

// TestHTTPPublishRateLimited checks that a publisher over its rate gets
// 429 with Retry-After and the WebSocket API's code, across requests.
func TestHTTPPublishRateLimited(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{Limits: bus.Limits{PublishRate: 0.001, PublishBurst: 1}})
	body := `{"topic":"jobs:a","payload":{"type":"t"}}`
	if a := httpDo(t, srv, "POST", "/v1/messages", body, nil); a.status != 201 {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	a := httpDo(t, srv, "POST", "/v1/messages", body, nil)
	if a.status != 429 || a.errorCode() != protocol.CodeRateLimited || a.header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %s Retry-After %q; want 429 rate limited with Retry-After", a.status, a.body, a.header.Get("Retry-After"))
	}
}

// TestHTTPPublishIdempotent checks that a repeat with the same key and
// body gets the first answer's message id and outcome (not what the
// subscribers answered, which the bus does not keep) and publishes
// nothing, that the key with another body is 409, and that another
// identity's key is its own.
func TestHTTPPublishIdempotent(t *testing.T) {
	srv := bustest.Start(t, nil)
	_, got := bustest.Collect(t, srv.URL, "worker", "jobs:*")
	body := `{"topic":"jobs:a","payload":{"type":"n","n":1}}`
	key := map[string]string{"Idempotency-Key": "k1"}
	first := httpDo(t, srv, "POST", "/v1/messages?wait=ack", body, key)
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := httpDo(t, srv, "POST", "/v1/messages?wait=ack", body, key)
	want := fmt.Sprintf(`{"messageId":%[1]q,"result":{"success":true,"messageId":%[1]q,"acks":[]}}`+"\n", first.messageID(t))
	if again.status != 201 || string(again.body) != want || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat: %d %s; want the first answer's id and outcome %s, replayed", again.status, again.body, want)
	}
	other := httpDo(t, srv, "POST", "/v1/messages?wait=ack", `{"topic":"jobs:a","payload":{"type":"n","n":2}}`, key)
	if other.status != 409 || other.errorCode() != protocol.CodeInvalidParams {
		t.Fatalf("another body: %d %s; want 409", other.status, other.body)
	}
	// Another clientId is another identity on an open bus: its k1 is new.
	third := httpDo(t, srv, "POST", "/v1/messages?wait=ack", `{"topic":"jobs:b","payload":{"type":"t"},"clientId":"other"}`, key)
	if third.status != 201 || third.messageID(t) == first.messageID(t) {
		t.Fatalf("other identity: %d %s; want a new message", third.status, third.body)
	}
	var ids []string
	for range 2 {
		ids = append(ids, (<-got).MessageID)
	}
	if ids[0] != first.messageID(t) || ids[1] != third.messageID(t) {
		t.Fatalf("delivered %v; want %s then %s", ids, first.messageID(t), third.messageID(t))
	}
	// Every delivery of first is in ids: the third was published after the
	// repeat, and a subscriber gets one publisher's messages in order.
}

// TestHTTPPublishIdempotencyExpires checks that a key is free again once
// the window has passed.
func TestHTTPPublishIdempotencyExpires(t *testing.T) {
	st := store.OpenMemory()
	now := time.Now()
	rec := &store.Idempotent{BodyHash: []byte{1}, Answer: []byte(`{}`), Expires: now.Add(time.Minute)}
	if err := st.PutIdempotent("id", "k", rec, now); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetIdempotent("id", "k", now); err != nil || got == nil {
		t.Fatalf("within the window: %v, %v", got, err)
	}
	if got, err := st.GetIdempotent("id", "k", now.Add(time.Minute)); err != nil || got != nil {
		t.Fatalf("after the window: %v, %v; want none", got, err)
	}
	if got, err := st.GetIdempotent("other", "k", now); err != nil || got != nil {
		t.Fatalf("another identity: %v, %v; want none", got, err)
	}
}

// TestHTTPPublishFailures checks the 500 of a store that fails and the
// 503 of a draining bus.
func TestHTTPPublishFailures(t *testing.T) {
	st := store.OpenMemory()
	srv := bustest.Start(t, &bus.Options{Store: st})
	_ = st.Close()
	a := httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, map[string]string{"Idempotency-Key": "k"})
	if a.status != 500 || a.errorCode() != protocol.CodeInternalError {
		t.Fatalf("closed store: %d %s; want 500", a.status, a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	_ = srv.Shutdown(ctx)
	a = httpDo(t, srv, "POST", "/v1/messages", `{"topic":"jobs:a","payload":{"type":"t"}}`, nil)
	if a.status != 503 || a.errorCode() != protocol.CodeShuttingDown || a.header.Get("Retry-After") == "" {
		t.Fatalf("draining: %d %s; want 503 with Retry-After", a.status, a.body)
	}
}

// TestSendMessageIdempotencyKey checks meta.idempotency_key on
// sendMessage: a repeat gets the first result's message id and outcome
// and publishes nothing,
// other params with the key are -32602, and a key that is no string is
// refused.
func TestSendMessageIdempotencyKey(t *testing.T) {
	srv := bustest.Start(t, nil)
	_, got := bustest.Collect(t, srv.URL, "worker", "jobs:*")
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("pub")
	params := map[string]any{"topic": "jobs:a", "payload": map[string]any{"type": "t"}, "meta": map[string]any{"idempotency_key": "k1"}}
	var first, again protocol.SendMessageResult
	pub.MustCall(protocol.MethodSendMessage, params, &first)
	pub.MustCall(protocol.MethodSendMessage, params, &again)
	if again.MessageID != first.MessageID || !again.Success || again.Acks == nil || len(again.Acks) != 0 {
		t.Fatalf("repeat: %+v; want the first result %+v", again, first)
	}
	params["payload"] = map[string]any{"type": "other"}
	if r := pub.Call(protocol.MethodSendMessage, params); r.Error == nil || r.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("another request with the key: %+v; want -32602", r)
	}
	params["meta"] = map[string]any{"idempotency_key": 7}
	if r := pub.Call(protocol.MethodSendMessage, params); r.Error == nil || r.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("a key that is no string: %+v; want -32602", r)
	}
	// Over HTTP, meta.idempotency_key works as the header does.
	body := `{"topic":"jobs:b","payload":{"type":"t"},"meta":{"idempotency_key":"k2"}}`
	a := httpDo(t, srv, "POST", "/v1/messages", body, nil)
	b := httpDo(t, srv, "POST", "/v1/messages", body, nil)
	if a.status != 201 || b.status != 201 || a.messageID(t) != b.messageID(t) {
		t.Fatalf("HTTP with meta key: %d %s then %d %s; want one message", a.status, a.body, b.status, b.body)
	}
	var ids []string
	for range 2 {
		ids = append(ids, (<-got).MessageID)
	}
	if ids[0] != first.MessageID || ids[1] != a.messageID(t) {
		t.Fatalf("delivered %v; want %s then %s, each once", ids, first.MessageID, a.messageID(t))
	}
	// A repeat that published would have been delivered before its
	// result came back, so before the HTTP publish: ids holds them all.
}

//go:embed openapi.json
var openAPIDoc []byte

// TestHTTPOpenAPIMatchesHandlers checks that every path, method and
// status this package's tests got is in /v1/openapi.json, and that every
// one the document lists for the API's paths was got: the document is
// the handlers'. It runs the tests that get them, so it stands alone
// under -run. The other doors' tests check their paths (bus's
// TestHTTPOpenAPIMatchesHandlers).
func TestHTTPOpenAPIMatchesHandlers(t *testing.T) {
	TestHTTPPublishStatuses(t)
	TestHTTPPublishRateLimited(t)
	TestHTTPPublishIdempotent(t)
	TestHTTPPublishFailures(t)
	httpSeen.Lock()
	defer httpSeen.Unlock()
	bustest.CheckOpenAPI(t, openAPIDoc, httpSeen.m, func(path string) bool {
		return path == httpapi.PathMessages || path == httpapi.PathOpenAPI
	})
}
