package console_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/console"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// consoleBus starts a bus with auth: root has admin, viewer does not,
// nor watcher, who may subscribe orders:* only;
// st is its store (nil: in memory).
func consoleBus(t *testing.T, st *store.Store) *bustest.Server {
	t.Helper()
	return consoleBusWith(t, func(o *bus.Options) {
		if st != nil {
			o.Store = st
		}
	})
}

// consoleBusWith is consoleBus with its options tuned.
func consoleBusWith(t *testing.T, tune func(*bus.Options)) *bustest.Server {
	t.Helper()
	o := &bus.Options{Auth: consoleAuth(t)}
	tune(o)
	return bustest.Start(t, withConsole(o))
}

// withConsole adds the console to o (nil: the defaults).
func withConsole(o *bus.Options) *bus.Options {
	if o == nil {
		o = &bus.Options{}
	}
	var jn *journal.Journal
	for _, e := range o.Extensions {
		if j, ok := e.(*journal.Journal); ok {
			jn = j
		}
	}
	if jn == nil {
		jn = journal.New(nil)
		o.Extensions = append(o.Extensions, jn)
	}
	o.Extensions = append(o.Extensions, console.Extension{Journal: jn})
	return o
}

// consoleNode is the add-ons of a cluster's node with the console: a
// journal of its own, which the console reads.
func consoleNode(string) []bus.Extension {
	jn := journal.New(nil)
	return []bus.Extension{jn, console.Extension{Journal: jn}}
}

// httpAnswer is an HTTP answer: its status, header and body.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// logins is bub_console_logins_total{outcome} of srv.
func logins(t *testing.T, srv *bustest.Server, outcome string) float64 {
	t.Helper()
	families, err := srv.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "bub_console_logins_total" && m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// consoleAuth is the authenticator of consoleBus: a new one each call,
// as a reload makes.
func consoleAuth(t *testing.T) *auth.Authenticator {
	t.Helper()
	sum := func(token string) string { h := sha256.Sum256([]byte(token)); return hex.EncodeToString(h[:]) }
	a, err := auth.New(auth.Config{Identities: []auth.Identity{
		{Name: "root", TokenSHA256: sum("root-token"), Grant: auth.Grant{ClientIDs: []string{"root"}, Admin: true,
			Publish: auth.Rules{Allow: []string{"*"}}, Subscribe: auth.Rules{Allow: []string{"*"}}}},
		{Name: "viewer", TokenSHA256: sum("viewer-token"), Grant: auth.Grant{ClientIDs: []string{"viewer"},
			Publish: auth.Rules{Allow: []string{"*"}}, Subscribe: auth.Rules{Allow: []string{"*"}}}},
		{Name: "watcher", TokenSHA256: sum("watcher-token"), Grant: auth.Grant{ClientIDs: []string{"watcher"},
			Subscribe: auth.Rules{Allow: []string{"orders:*"}}}},
	}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// consoleClient is a browser's side of a console session.
type consoleClient struct {
	t      *testing.T
	http   *http.Client
	base   string
	cookie *http.Cookie
	csrf   string
}

func (c *consoleClient) do(method, path, body string, header map[string]string) httpAnswer {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

// login logs in with token and keeps the session's cookie and CSRF
// token; it returns the answer.
func (c *consoleClient) login(token string) httpAnswer {
	c.t.Helper()
	a := c.do(http.MethodPost, "/console/api/login", fmt.Sprintf(`{"token": %q}`, token), nil)
	if a.status != http.StatusOK {
		return a
	}
	for _, ck := range (&http.Response{Header: a.header}).Cookies() {
		if ck.Name == "bub_console" {
			c.cookie = ck
		}
	}
	var s struct {
		CSRF string `json:"csrf"`
	}
	if err := json.Unmarshal(a.body, &s); err != nil || s.CSRF == "" || c.cookie == nil {
		c.t.Fatalf("login answered %s with cookies %v", a.body, a.header.Values("Set-Cookie"))
	}
	c.csrf = s.CSRF
	return a
}

// post sends a state-changing request with the session's CSRF token.
func (c *consoleClient) post(path, body string) httpAnswer {
	c.t.Helper()
	return c.do(http.MethodPost, path, body, map[string]string{"X-Bub-CSRF": c.csrf, "Content-Type": "application/json"})
}

// stream opens the event stream at path with the session's cookie and
// fails the test unless it answers 200 with text/event-stream. Reading
// it is bounded by bustest.Timeout, so that a stream that does not end
// fails the read, not the run; it is closed when the test ends.
func (c *consoleClient) stream(path string) *http.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), bustest.Timeout)
	c.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.AddCookie(c.cookie)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("stream %s: %v", path, err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		c.t.Fatalf("stream %s: %d %s", path, resp.StatusCode, ct)
	}
	return resp
}

func newConsoleClient(t *testing.T, srv *bustest.Server) *consoleClient {
	return &consoleClient{t: t, http: http.DefaultClient, base: srv.HTTP.URL}
}

// The console's session: only an admin credential logs in; the cookie
// is HttpOnly and SameSite=Strict, scoped to the console; every change
// needs the CSRF token; the cookie authorizes neither /v1/ nor a
// WebSocket peer; logout ends it.
func TestConsoleSession(t *testing.T) {
	srv := consoleBus(t, nil)
	c := newConsoleClient(t, srv)

	page := c.do(http.MethodGet, "/console/", "", nil)
	if page.status != http.StatusOK || !strings.Contains(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console/: %d %s", page.status, page.header.Get("Content-Type"))
	}
	csp := page.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q allows inline or eval", csp)
	}
	if a := c.do(http.MethodGet, "/console", "", nil); a.status != http.StatusOK {
		t.Errorf("GET /console (redirected): %d", a.status)
	}
	if a := c.do(http.MethodGet, "/console/api/clients", "", nil); a.status != http.StatusUnauthorized {
		t.Fatalf("clients without a session: %d %s", a.status, a.body)
	}

	for _, tc := range []struct {
		token  string
		status int
		says   string
	}{
		{"", http.StatusUnauthorized, "not accepted"},
		{"wrong-token", http.StatusUnauthorized, "not accepted"},
	} {
		if a := c.login(tc.token); a.status != tc.status || !strings.Contains(string(a.body), tc.says) {
			t.Errorf("login with %q: %d %s, want %d saying %q", tc.token, a.status, a.body, tc.status, tc.says)
		}
	}
	if a := c.do(http.MethodPost, "/console/api/login", `{"token": "root-token"}`, map[string]string{"Origin": "http://evil.example"}); a.status != http.StatusForbidden {
		t.Errorf("login from another origin: %d %s", a.status, a.body)
	}

	c.login("root-token")
	if !c.cookie.HttpOnly || c.cookie.SameSite != http.SameSiteStrictMode || c.cookie.Path != "/console/" || c.cookie.Secure {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/console/, not Secure over plain HTTP", c.cookie)
	}
	if a := c.do(http.MethodGet, "/console/api/clients", "", nil); a.status != http.StatusOK {
		t.Fatalf("clients with the session: %d %s", a.status, a.body)
	}

	// No CSRF token, a wrong one: refused, and the session goes on.
	for _, h := range []map[string]string{nil, {"X-Bub-CSRF": "nope"}} {
		if a := c.do(http.MethodPost, "/console/api/logout", "{}", h); a.status != http.StatusForbidden {
			t.Errorf("logout with %v: %d %s", h, a.status, a.body)
		}
	}

	// The cookie is no credential for the HTTP API...
	if a := c.do(http.MethodPost, "/v1/messages", `{"topic": "a:b", "payload": {"type": "x"}}`, map[string]string{"X-Bub-CSRF": c.csrf}); a.status != http.StatusUnauthorized {
		t.Errorf("/v1/messages with the console cookie: %d %s", a.status, a.body)
	}
	// ...nor for a WebSocket peer: initialize needs a token.
	ctx := t.Context()
	ws, _, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {c.cookie.String()}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientId":"root"}}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(init)); err != nil {
		t.Fatal(err)
	}
	_, answer, err := ws.Read(ctx)
	if err != nil || !bytes.Contains(answer, []byte(fmt.Sprint(protocol.CodeUnauthorized))) {
		t.Errorf("initialize with only the console cookie answered %s (%v)", answer, err)
	}

	if a := c.post("/console/api/logout", "{}"); a.status != http.StatusOK {
		t.Fatalf("logout: %d %s", a.status, a.body)
	}
	if a := c.do(http.MethodGet, "/console/api/clients", "", nil); a.status != http.StatusUnauthorized {
		t.Errorf("clients after logout: %d %s", a.status, a.body)
	}
}

// Served over TLS, the session cookie is Secure.
func TestConsoleCookieSecureOverTLS(t *testing.T) {
	srv := consoleBus(t, nil)
	ts := httptest.NewTLSServer(srv.Server)
	t.Cleanup(ts.Close)
	c := &consoleClient{t: t, http: ts.Client(), base: ts.URL}
	if a := c.login("root-token"); a.status != http.StatusOK {
		t.Fatalf("login over TLS: %d %s", a.status, a.body)
	}
	if !c.cookie.Secure || !c.cookie.HttpOnly || c.cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over TLS %+v: want Secure, HttpOnly, SameSite=Strict", c.cookie)
	}
}

// The whole console, as embedded, is under 200 KB.
func TestConsoleSize(t *testing.T) {
	total := 0
	for _, name := range []string{"index.html", "console.css", "console.js"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	if total == 0 || total >= 200_000 {
		t.Fatalf("console is %d bytes; keep it under 200,000", total)
	}
	t.Logf("console: %d bytes", total)
}

// The console answers pages of a large dead-letter queue at once, and a
// purge removes exactly what the operator confirmed: none that died
// after the count. The store is on disk, as bub serve's is (without
// fsync, to fill it fast): the in-memory one sorts its keys on every read.
func TestConsoleDeadLetterPagingAndPurge(t *testing.T) {
	st, err := store.Open(t.TempDir(), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := consoleBus(t, st)
	n := 100_000
	if testing.Short() || raceOn {
		n = 10_000
	}
	start := time.Now()
	// Writers at once share commits (store/commit.go).
	const writers = 16
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := w; i < n; i += writers {
				reason := protocol.ReasonMaxRetries
				if i%2 == 1 {
					reason = protocol.ReasonRejected
				}
				if _, err := srv.Store.DeadLetter("", &store.DeadLetter{Message: store.Message{ID: fmt.Sprint("m-", i), Topic: "jobs:x", Payload: json.RawMessage(`{"type":"t"}`)}, Reason: reason}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("stored %d dead letters in %v", n, time.Since(start))
	c := newConsoleClient(t, srv)
	c.login("root-token")

	start = time.Now()
	a := c.do(http.MethodGet, "/console/api/deadletters?limit=50", "", nil)
	var page struct {
		Entries []json.RawMessage `json:"entries"`
		Next    string            `json:"next"`
		Total   int               `json:"total"`
	}
	if err := json.Unmarshal(a.body, &page); err != nil || len(page.Entries) != 50 || page.Next == "" || page.Total != n {
		t.Fatalf("first page: %d entries, next %q, total %d (%v): %.200s", len(page.Entries), page.Next, page.Total, err, a.body)
	}
	t.Logf("first page of %d in %v", n, time.Since(start))
	if a := c.do(http.MethodGet, "/console/api/deadletters?limit=50&cursor="+page.Next, "", nil); a.status != http.StatusOK {
		t.Fatalf("second page: %d %s", a.status, a.body)
	}
	if a := c.do(http.MethodGet, "/console/api/deadletters?limit=100000", "", nil); a.status != http.StatusBadRequest {
		t.Errorf("a page of 100000: %d", a.status)
	}

	start = time.Now()
	var count struct {
		Count int    `json:"count"`
		AsOf  string `json:"asOf"`
	}
	a = c.do(http.MethodGet, "/console/api/deadletters/count?reason=rejected", "", nil)
	if err := json.Unmarshal(a.body, &count); err != nil || count.Count != n/2 {
		t.Fatalf("count of rejected: %s (%v)", a.body, err)
	}
	t.Logf("counted %d of %d in %v", count.Count, n, time.Since(start))
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if a := c.do(http.MethodGet, "/console/api/deadletters/count?since="+future, "", nil); !strings.Contains(string(a.body), `"count":0`) {
		t.Errorf("count of those dead in an hour: %s", a.body)
	}
	if a := c.do(http.MethodGet, "/console/api/deadletters?since=yesterday", "", nil); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "since") {
		t.Errorf("since=yesterday: %d %s", a.status, a.body)
	}
	// One more dies after the count: the purge leaves it.
	if _, err := srv.Store.DeadLetter("", &store.DeadLetter{Message: store.Message{ID: "late", Topic: "jobs:x"}, Reason: protocol.ReasonRejected}); err != nil {
		t.Fatal(err)
	}
	if a := c.post("/console/api/deadletters/purge", `{"reason": "rejected"}`); a.status != http.StatusBadRequest {
		t.Errorf("a purge without asOf: %d %s", a.status, a.body)
	}
	a = c.post("/console/api/deadletters/purge", fmt.Sprintf(`{"reason": "rejected", "asOf": %q}`, count.AsOf))
	var purged protocol.DLQPurgeResult
	if err := json.Unmarshal(a.body, &purged); err != nil || purged.Purged != n/2 {
		t.Fatalf("purge: %s (%v), want %d purged", a.body, err, n/2)
	}
	if left, _ := srv.Store.CountDeadLetters(); left != n/2+1 {
		t.Fatalf("%d dead letters left, want %d", left, n/2+1)
	}
}

// Clients shows a peer's connection, and an operator disconnects it.
func TestConsoleClientsAndDisconnect(t *testing.T) {
	srv := bustest.Start(t, withConsole(nil))
	peer := bustest.Connect(t, srv.URL, "worker-1", nil)
	peer.Subscribe("jobs:*", protocol.PolicyContinueAll)
	c := newConsoleClient(t, srv)
	c.login("")

	a := c.do(http.MethodGet, "/console/api/clients?q=worker", "", nil)
	var list struct {
		Clients []struct {
			ClientID      string `json:"clientId"`
			Address       string `json:"address"`
			Subscriptions []struct {
				Pattern string `json:"pattern"`
				Policy  string `json:"policy"`
			} `json:"subscriptions"`
		} `json:"clients"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal(a.body, &list); err != nil || list.Total != 1 || list.Clients[0].ClientID != "worker-1" ||
		len(list.Clients[0].Subscriptions) != 1 || list.Clients[0].Subscriptions[0].Policy != string(protocol.PolicyContinueAll) || list.Clients[0].Address == "" {
		t.Fatalf("clients: %s (%v)", a.body, err)
	}
	a = c.do(http.MethodGet, "/console/api/chain?topic=jobs:1", "", nil)
	if !strings.Contains(string(a.body), `"clientId":"worker-1"`) || !strings.Contains(string(a.body), `"pattern":"jobs:*"`) {
		t.Fatalf("chain of jobs:1: %s", a.body)
	}
	if a := c.post("/console/api/clients/close", `{"clientId": "nobody"}`); a.status != http.StatusNotFound {
		t.Errorf("disconnect nobody: %d %s", a.status, a.body)
	}
	if a := c.post("/console/api/clients/close", `{"clientId": "worker-1"}`); a.status != http.StatusOK {
		t.Fatalf("disconnect: %d %s", a.status, a.body)
	}
	if code := peer.Closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v", code)
	}
}

// The stream sends the history of samples and then each new one, until
// the session ends.
func TestConsoleStream(t *testing.T) {
	srv := bustest.Start(t, withConsole(nil))
	c := newConsoleClient(t, srv)
	c.login("")
	resp := c.stream("/console/api/stream")
	buf := make([]byte, 4096)
	got := ""
	for strings.Count(got, "event: sample") < 2 {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("read stream: %v after %q", err, got)
		}
		got += string(buf[:n])
	}
	if !strings.Contains(got, `"connections":`) || !strings.Contains(got, `"deadLetters":`) {
		t.Fatalf("stream: %q", got)
	}
	if a := c.post("/console/api/logout", "{}"); a.status != http.StatusOK {
		t.Fatalf("logout: %d %s", a.status, a.body)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("the stream went on after logout: %v", err)
	}
}

// Agents shows what the spawner's lifecycle events last said of each
// agent.
func TestConsoleAgents(t *testing.T) {
	srv := bustest.Start(t, withConsole(nil))
	spawner := bustest.Connect(t, srv.URL, "spawner", nil)
	for _, ev := range []string{
		`{"type":"agent_event","event":"spawned","agent_id":"a1","topic":"agent:a1","workspace":"/w/a1","pid":7,"timestamp":"2026-01-01T00:00:00Z"}`,
		`{"type":"agent_event","event":"ready","agent_id":"a1","topic":"agent:a1","pid":7,"timestamp":"2026-01-01T00:00:01Z"}`,
		`{"type":"agent_event","event":"hibernated","agent_id":"a2","topic":"agent:a2","reason":"idle","timestamp":"2026-01-01T00:00:02Z"}`,
		`{"type":"agent_event","event":"exited","agent_id":"a3","status":"exit status 1","restarting":true,"timestamp":"2026-01-01T00:00:03Z"}`,
	} {
		var e struct {
			Event string `json:"event"`
		}
		_ = json.Unmarshal([]byte(ev), &e)
		spawner.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "system:agent." + e.Event, "payload": json.RawMessage(ev)}, nil)
	}
	c := newConsoleClient(t, srv)
	c.login("")
	a := c.do(http.MethodGet, "/console/api/agents", "", nil)
	var list struct {
		Agents []struct {
			AgentID   string `json:"agentId"`
			State     string `json:"state"`
			Workspace string `json:"workspace"`
			From      string `json:"from"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(a.body, &list); err != nil || len(list.Agents) != 3 {
		t.Fatalf("agents: %s (%v)", a.body, err)
	}
	for i, want := range []struct{ id, state string }{{"a1", "running"}, {"a2", "hibernated"}, {"a3", "restarting"}} {
		if got := list.Agents[i]; got.AgentID != want.id || got.State != want.state || got.From != "spawner" {
			t.Errorf("agent %d: %+v, want %s %s from spawner", i, got, want.id, want.state)
		}
	}
	if list.Agents[0].Workspace != "/w/a1" {
		t.Errorf("a1's workspace %q", list.Agents[0].Workspace)
	}
}

// In a cluster, one node's console shows the clients that hold
// subscriptions on every node, with their node, in the chain too; it
// counts the nodes; and it says which node to disconnect a client from.
func TestConsoleCluster(t *testing.T) {
	nodes := clustertest.StartExtended(t, nil, consoleNode, "a", "b")
	a, b := nodes[0], nodes[1]
	bustest.Connect(t, b.URL, "on-b", nil).Subscribe("jobs:*", protocol.PolicyContinueAll)
	bustest.Connect(t, a.URL, "on-a", nil).Subscribe("jobs:1", "")
	c := newConsoleClient(t, a)
	c.login("")

	var list struct {
		Clients []struct {
			ClientID string `json:"clientId"`
			Node     string `json:"node"`
			Local    bool   `json:"local"`
		} `json:"clients"`
	}
	var ch struct {
		Chain []struct {
			ClientID string `json:"clientId"`
			Node     string `json:"node"`
		} `json:"chain"`
	}
	// b's client and its subscription reach a through the cluster's
	// order, each in its own time: the wait is for both.
	var chain httpAnswer
	require.Eventually(t, func() bool {
		a := c.do(http.MethodGet, "/console/api/clients", "", nil)
		chain = c.do(http.MethodGet, "/console/api/chain?topic=jobs:1", "", nil)
		return json.Unmarshal(a.body, &list) == nil && len(list.Clients) == 2 &&
			json.Unmarshal(chain.body, &ch) == nil && len(ch.Chain) == 2
	}, 30*time.Second, 20*time.Millisecond, "both clients and both subscriptions seen from a")
	if len(list.Clients) != 2 || list.Clients[0].ClientID != "on-a" || !list.Clients[0].Local || list.Clients[0].Node != "a" ||
		list.Clients[1].ClientID != "on-b" || list.Clients[1].Local || list.Clients[1].Node != "b" {
		t.Fatalf("clients seen from a: %+v", list.Clients)
	}
	if ch.Chain[0].ClientID != "on-a" || ch.Chain[1].Node != "b" {
		t.Fatalf("chain of jobs:1 seen from a: %s", chain.body)
	}
	if a := c.post("/console/api/clients/close", `{"clientId": "on-b"}`); a.status != http.StatusConflict || !strings.Contains(string(a.body), "node b") {
		t.Errorf("disconnect on-b from a: %d %s", a.status, a.body)
	}

	// The Messages page of a finds a message published on b: b's
	// journal answers a's search.
	id := bustest.Connect(t, b.URL, "pub-b", nil).Publish("misc:2", "t").MessageID
	var page protocol.JournalPage
	// A node that does not answer the search in time is named in
	// Missing, as it should be on a loaded box: the page asked for is
	// a whole one, with b's answer in it.
	require.Eventually(t, func() bool {
		a := c.do(http.MethodGet, "/console/api/events?messageId="+id, "", nil)
		page = protocol.JournalPage{}
		return json.Unmarshal(a.body, &page) == nil && len(page.Events) >= 2 && len(page.Missing) == 0
	}, 30*time.Second, 20*time.Millisecond, "b's events of %s seen from a's console; last page %+v", id, &page)
	for _, ev := range page.Events {
		require.Equal(t, "b", ev.Node, "%+v", ev)
	}
}

// The Messages page's endpoints: a message is found by its id (its
// whole story) and by its correlation id, a search narrows by kind,
// topic and time, its payload comes only when asked for, a bad query is
// refused naming what is wrong, the cookie opens these and never
// /v1/events, and the tail streams a message published after it opened.
func TestConsoleMessages(t *testing.T) {
	srv := consoleBusWith(t, func(o *bus.Options) {
		o.Extensions = []bus.Extension{journal.New(&journal.Options{Payloads: true})}
	})
	worker := bustest.DialToken(t, srv.URL, "root-token")
	worker.OnProcess(bustest.Processed)
	worker.Initialize("root")
	worker.Subscribe("orders:*", protocol.PolicyContinueAll)
	var sent protocol.SendMessageResult
	worker.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "orders:new", "payload": map[string]string{"type": "order", "note": "secret-note"},
		"meta": map[string]string{"correlation_id": "conv-7"}}, &sent)
	invoice := worker.Publish("invoices:1", "invoice")
	c := newConsoleClient(t, srv)
	c.login("root-token")

	page := func(query string) protocol.JournalPage {
		t.Helper()
		a := c.do(http.MethodGet, "/console/api/events?"+query, "", nil)
		var p protocol.JournalPage
		if a.status != http.StatusOK || json.Unmarshal(a.body, &p) != nil {
			t.Fatalf("events?%s: %d %s", query, a.status, a.body)
		}
		return p
	}
	story := page("messageId=" + sent.MessageID)
	if got := bustest.JournalKinds(story.Events); strings.Join(got, " ") != "accepted routed:root delivery:root:processed" {
		t.Fatalf("story of %s: %v", sent.MessageID, got)
	}
	for _, ev := range story.Events {
		if ev.Payload != nil || ev.CorrelationID != "conv-7" {
			t.Fatalf("event %+v: want no payload unasked, correlation conv-7", ev)
		}
	}
	if p := page("messageId=" + sent.MessageID + "&kind=accepted&payloads=1"); len(p.Events) != 1 || !strings.Contains(string(p.Events[0].Payload), "secret-note") {
		t.Fatalf("payload asked for: %+v", p.Events)
	}
	if p := page("correlationId=conv-7&kind=accepted"); len(p.Events) != 1 || p.Events[0].MessageID != sent.MessageID {
		t.Fatalf("by correlation id: %+v", p.Events)
	}
	if p := page("topic=refunds:*"); len(p.Events) != 0 {
		t.Fatalf("another topic: %+v", p.Events)
	}
	if p := page("topic=orders:*&until=1h"); len(p.Events) != 0 {
		t.Fatalf("until an hour ago: %+v", p.Events)
	}
	if p := page("topic=orders:*&since=1h&limit=2"); len(p.Events) != 2 || !p.More {
		t.Fatalf("a page of 2 of 3: %+v", p)
	}
	for query, says := range map[string]string{
		"payloads=yes": "payloads", "kind=sent": "kind", "since=1m&until=1h": "before since", "messageId=": "messageId", "topics=x": "topics",
	} {
		if a := c.do(http.MethodGet, "/console/api/events?"+query, "", nil); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), says) {
			t.Errorf("events?%s: %d %s, want 400 naming %s", query, a.status, a.body, says)
		}
	}
	if a := c.do(http.MethodGet, journal.PathEvents, "", nil); a.status != http.StatusUnauthorized {
		t.Errorf("/v1/events with the console cookie: %d %s", a.status, a.body)
	}
	anon := newConsoleClient(t, srv)
	if a := anon.do(http.MethodGet, "/console/api/events", "", nil); a.status != http.StatusUnauthorized {
		t.Errorf("events without a session: %d %s", a.status, a.body)
	}
	if p := page("messageId=" + invoice.MessageID); len(p.Events) == 0 {
		t.Fatalf("the admin does not see invoices:1")
	}

	// A credential without admin gets the Messages page alone, read-only,
	// and there what its grant may subscribe to: orders:*, not invoices:1.
	w := newConsoleClient(t, srv)
	if a := w.login("watcher-token"); a.status != http.StatusOK || !strings.Contains(string(a.body), `"admin":false`) {
		t.Fatalf("watcher's login: %d %s", a.status, a.body)
	}
	a := w.do(http.MethodGet, "/console/api/events?limit=1000", "", nil)
	var seen protocol.JournalPage
	if err := json.Unmarshal(a.body, &seen); err != nil || a.status != http.StatusOK || len(seen.Events) == 0 {
		t.Fatalf("watcher's events: %d %s", a.status, a.body)
	}
	for _, ev := range seen.Events {
		if ev.Topic != "orders:new" {
			t.Fatalf("watcher sees %s on %s, beyond its grant", ev.Kind, ev.Topic)
		}
	}
	for _, path := range []string{"clients", "chain?topic=orders:new", "deadletters", "stream", "bcp", "agents", "approvals"} {
		if a := w.do(http.MethodGet, "/console/api/"+path, "", nil); a.status != http.StatusForbidden || !strings.Contains(string(a.body), "needs admin") {
			t.Errorf("watcher's %s: %d %s", path, a.status, a.body)
		}
	}
	if a := w.post("/console/api/deadletters/purge", `{"asOf": "2030-01-01T00:00:00Z"}`); a.status != http.StatusForbidden {
		t.Errorf("watcher's purge: %d %s", a.status, a.body)
	}

	resp := c.stream("/console/api/events/stream?topic=orders:*")
	// The tail starts with the next event: the headers came once the
	// stream fixed where it starts.
	tailed := worker.Publish("orders:tailed", "order")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev protocol.JournalEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("tail data %q: %v", data, err)
		}
		if ev.MessageID == sent.MessageID {
			t.Fatalf("the tail showed a message from before it opened: %+v", ev)
		}
		if ev.Payload != nil {
			t.Fatalf("the tail showed a payload: %+v", ev)
		}
		if ev.MessageID == tailed.MessageID {
			return
		}
	}
	t.Fatalf("the tail ended without %s: %v", tailed.MessageID, sc.Err())
}

// The BCP page shows each channel's budget as the gateway's last
// system:bcp.budget event said, and the recent validation failures and
// anomalies, newest first, each with who published it.
func TestConsoleBCPEvents(t *testing.T) {
	// Unheard, and heard by one subscriber (whose delivery the bus makes
	// from its read loops, bus/direct.go): the console sees the events
	// either way.
	for _, heard := range []bool{false, true} {
		t.Run(fmt.Sprintf("subscribed=%v", heard), func(t *testing.T) {
			srv := bustest.Start(t, withConsole(nil))
			if heard {
				bustest.Collect(t, srv.URL, "watcher", "system:bcp.*")
			}
			gw := bustest.Connect(t, srv.URL, "bcp-gateway", nil)
			for _, p := range []struct{ topic, payload string }{
				{"system:bcp.budget", `{"type":"bcp_channel_budget","event":"charge","controller":"main","reader":"researcher","spent_bits":55,"remaining_bits":145,"budget_bits":200,"cat2_queries":1,"max_cat2_queries":2,"at":"2026-01-01T00:00:00Z"}`},
				{"system:bcp.budget", `{"type":"bcp_channel_budget","event":"charge","controller":"main","reader":"researcher","spent_bits":110,"remaining_bits":90,"budget_bits":200,"cat2_queries":2,"max_cat2_queries":2,"at":"2026-01-01T00:00:01Z"}`},
				{"system:bcp.validation", `{"type":"bcp_validation_failed","controller":"main","reader":"researcher","query_id":"q-1","category":2,"code":"too_many_words","attempts_left":2,"at":"2026-01-01T00:00:02Z"}`},
				{"system:bcp.validation", `{"type":"bcp_anomaly","controller":"main","reader":"researcher","query_id":"q-1","category":2,"anomalies":{"url":1},"at":"2026-01-01T00:00:03Z"}`},
				{"system:bcp.validation", `{"type":"something_else","controller":"main","reader":"researcher"}`},
			} {
				gw.MustCall(protocol.MethodSendMessage, map[string]any{"topic": p.topic, "payload": json.RawMessage(p.payload)}, nil)
			}
			c := newConsoleClient(t, srv)
			c.login("")
			a := c.do(http.MethodGet, "/console/api/bcp", "", nil)
			var got struct {
				Channels []struct {
					Controller    string  `json:"controller"`
					Reader        string  `json:"reader"`
					RemainingBits float64 `json:"remaining_bits"`
					Cat2Queries   int     `json:"cat2_queries"`
					From          string  `json:"from"`
				} `json:"channels"`
				Total int `json:"total"`
				// The names the console's script reads: the
				// protocol's, as the gateway wrote them.
				Recent []struct {
					Kind         string         `json:"kind"`
					QueryID      string         `json:"query_id"`
					Code         string         `json:"code"`
					AttemptsLeft *int           `json:"attempts_left"`
					Anomalies    map[string]int `json:"anomalies"`
					From         string         `json:"from"`
				} `json:"recent"`
			}
			if err := json.Unmarshal(a.body, &got); err != nil || got.Total != 1 || len(got.Channels) != 1 || len(got.Recent) != 2 {
				t.Fatalf("bcp: %s (%v)", a.body, err)
			}
			if ch := got.Channels[0]; ch.Controller != "main" || ch.Reader != "researcher" || ch.RemainingBits != 90 || ch.Cat2Queries != 2 || ch.From != "bcp-gateway" {
				t.Errorf("channel %+v: want the last event's 90 bits left, from bcp-gateway", ch)
			}
			if r := got.Recent; r[0].Kind != "anomaly" || r[0].Anomalies["url"] != 1 || r[1].Kind != "failure" || r[1].Code != "too_many_words" {
				t.Errorf("recent %+v: want the anomaly, then the failure", r)
			}
			if f := got.Recent[1]; f.QueryID != "q-1" || f.AttemptsLeft == nil || *f.AttemptsLeft != 2 || f.Anomalies != nil || f.From != "bcp-gateway" {
				t.Errorf("failure %+v: want query q-1 with 2 attempts left, no anomalies, from bcp-gateway", f)
			}
		})
	}
}

// A tail ends with its session: logged out, the stream shows nothing
// more once the bus next decides its reader again (a reload here; a
// keepalive otherwise).
func TestConsoleTailEndsWithSession(t *testing.T) {
	srv := consoleBus(t, nil)
	c := newConsoleClient(t, srv)
	c.login("root-token")
	resp := c.stream("/console/api/events/stream")
	if a := c.post("/console/api/logout", "{}"); a.status != http.StatusOK {
		t.Fatalf("logout: %d %s", a.status, a.body)
	}
	srv.SetAuth(consoleAuth(t))
	root := bustest.DialToken(t, srv.URL, "root-token")
	root.Initialize("root")
	root.Publish("orders:after-logout", "order")
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the tail did not end cleanly: %v", err)
	}
	if strings.Contains(string(body), "after-logout") {
		t.Fatalf("the tail showed an event after logout: %s", body)
	}
}

// TestConsoleSessionsNotEndedByOthers (issue 36, reproduction 3): logins
// with a credential without admin end that credential's own oldest
// sessions, never an admin's; logins are throttled per address with
// Retry-After, and wrong ones are counted.
func TestConsoleSessionsNotEndedByOthers(t *testing.T) {
	t.Parallel()
	srv := consoleBus(t, nil)
	admin := newConsoleClient(t, srv)
	require.Equal(t, http.StatusOK, admin.login("root-token").status)
	var viewers []*consoleClient
	var throttled httpAnswer
	for range 30 {
		v := newConsoleClient(t, srv)
		a := v.login("viewer-token")
		if a.status == http.StatusTooManyRequests {
			throttled = a
			break
		}
		require.Equal(t, http.StatusOK, a.status, string(a.body))
		viewers = append(viewers, v)
	}
	// 10 attempts from the address, the admin's among them (one more
	// for each 6 s the loop took).
	require.GreaterOrEqual(t, len(viewers), 9)
	require.Equal(t, http.StatusTooManyRequests, throttled.status, "logins were never throttled")
	require.NotEmpty(t, throttled.header.Get("Retry-After"))
	var refusal struct {
		Error protocol.Error `json:"error"`
	}
	require.NoError(t, json.Unmarshal(throttled.body, &refusal))
	require.EqualValues(t, protocol.CodeRateLimited, refusal.Error.Code)

	require.Equal(t, http.StatusOK, admin.do(http.MethodGet, "/console/api/session", "", nil).status, "the admin is still logged in")
	// The viewer holds its 8 newest sessions: its next logins ended its
	// oldest.
	kept := len(viewers) - 8
	for i, v := range viewers {
		want := http.StatusOK
		if i < kept {
			want = http.StatusUnauthorized
		}
		require.Equal(t, want, v.do(http.MethodGet, "/console/api/session", "", nil).status, "the viewer's session %d", i)
	}

	// Wrong tokens, on a bus of their own: refused until throttled; each
	// counted.
	srv2 := consoleBus(t, nil)
	guesser := newConsoleClient(t, srv2)
	refused := 0
	for a := guesser.login("guess"); a.status != http.StatusTooManyRequests; a = guesser.login("guess") {
		require.Equal(t, http.StatusUnauthorized, a.status, string(a.body))
		refused++
		require.Less(t, refused, 30, "wrong logins were never throttled")
	}
	require.GreaterOrEqual(t, refused, 10)
	require.Equal(t, float64(refused), logins(t, srv2, "refused"))
	require.Equal(t, 1.0, logins(t, srv2, "throttled"))
}
