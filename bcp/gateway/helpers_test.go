package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// The agents of the tests: main controls researcher (up to Category 2,
// with subscriptions) and scraper (up to Category 3, three escalations a
// session, a Category-3 subscription); researcher is tainted high,
// scraper medium.
var testAgents = map[string]string{
	"main.md": `---
name: main
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 200
    max_cat2_queries: 2
    subscriptions:
      - id: alerts
        max_pushes_per_hour: 2
        category: 1
        fields:
          - name: urgent
            type: boolean
          - name: priority
            type: enum
            values: [low, medium, high, critical]
      - id: findings
        category: 2
        questions:
          - id: topic
            question: "What is the topic?"
            max_words: 5
            expected_format: short_text
  - peer: scraper
    role: controller
    max_category: 3
    budget_bits: 5000
    max_cat3_queries: 3
    subscriptions:
      - id: digest
        category: 3
        directive: "Summarize what changed."
        max_words: 10
---
Controller.
`,
	"researcher.md": `---
name: researcher
base_taint: high
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 200
---
Reader.
`,
	"scraper.md": `---
name: scraper
base_taint: medium
bcp_channels:
  - peer: main
    role: reader
    max_category: 3
    budget_bits: 5000
---
Reader.
`,
}

// tokens are the static credentials of the test identities.
var tokens = map[string]string{
	"main": "main-token", "researcher": "researcher-token", "scraper": "scraper-token", "bcp-gateway": "gateway-token",
	"alice": "alice-token", "bob": "bob-token", "telegram": "telegram-token",
	"ops": "ops-token", "observer": "observer-token",
}

func sha(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// authConfig is docs/SECURITY.md's BCP shape plus the gateway's grant.
func authConfig() auth.Config {
	agent := func(name string) auth.Identity {
		return auth.Identity{Name: name, TokenSHA256: sha(tokens[name]), Grant: auth.Grant{
			ClientIDs: []string{name},
			Publish:   auth.Rules{Allow: []string{"bcp:*"}},
			Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}},
		}}
	}
	approver := func(name string) auth.Identity {
		return auth.Identity{Name: name, TokenSHA256: sha(tokens[name]), Grant: auth.Grant{
			ClientIDs: []string{name},
			Publish:   auth.Rules{Allow: []string{"bcp:approval"}},
			Subscribe: auth.Rules{Allow: []string{"bcp:approval.requested.{{clientId}}"}},
		}}
	}
	return auth.Config{Identities: []auth.Identity{
		agent("main"), agent("researcher"), agent("scraper"),
		// An operator's monitor of budget alerts and of the gateway's
		// events for operators.
		{Name: "ops", TokenSHA256: sha(tokens["ops"]), Grant: auth.Grant{
			ClientIDs: []string{"ops"},
			Subscribe: auth.Rules{Allow: []string{"alert:bcp.budget", "system:bcp.*"}},
		}},
		// Another observer of the bus's client events, as the spawner is.
		{Name: "observer", TokenSHA256: sha(tokens["observer"]), Grant: auth.Grant{
			ClientIDs: []string{"observer"},
			Subscribe: auth.Rules{Allow: []string{"system:client.*"}},
		}},
		// Humans' clients: decide on bcp:approval, watch requests.
		approver("alice"), approver("bob"),
		// A relay: the Telegram bridge, deciding for Telegram users.
		{Name: "telegram", TokenSHA256: sha(tokens["telegram"]), Grant: auth.Grant{
			ClientIDs: []string{"telegram"},
			Publish:   auth.Rules{Allow: []string{"bcp:approval"}},
			Subscribe: auth.Rules{Allow: []string{"bcp:approval.requested.{{clientId}}"}},
		}},
		{Name: "bcp-gateway", TokenSHA256: sha(tokens["bcp-gateway"]), Grant: auth.Grant{
			ClientIDs: []string{"bcp-gateway"},
			Publish:   auth.Rules{Allow: []string{"agent:*", "bcp:approval.requested.*", "alert:bcp.budget", "system:bcp.*"}},
			Subscribe: auth.Rules{Allow: []string{"bcp:*", "system:client.*"}},
		}},
	}}
}

// fixture is a bus with auth on, the test agents' definitions and a data
// dir for the gateway.
type fixture struct {
	t       *testing.T
	srv     *bustest.Server
	defs    []*bcp.Definition
	dataDir string
	// g is the gateway started last, which agent.quiet waits on.
	g *Gateway
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

// newFixtureWith is newFixture with the bus's options tuned.
func newFixtureWith(t *testing.T, tune func(*bus.Options)) *fixture {
	t.Helper()
	authn, err := auth.New(authConfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range testAgents {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defs, err := bcp.LoadDefinitions(dir)
	if err != nil {
		t.Fatalf("test definitions: %v", err)
	}
	opts := &bus.Options{Auth: authn}
	if tune != nil {
		tune(opts)
	}
	srv := bustest.Start(t, opts)
	return &fixture{t: t, srv: srv, defs: defs, dataDir: t.TempDir()}
}

// gateway starts a gateway on the fixture's data dir; opts may tune it.
func (f *fixture) gateway(tune func(*Options)) *Gateway {
	f.t.Helper()
	opts := Options{
		BusURL: f.srv.URL, Token: tokens["bcp-gateway"], Definitions: f.defs, DataDir: f.dataDir,
		sweepInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}
	if tune != nil {
		tune(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	g, err := Start(ctx, opts)
	if err != nil {
		f.t.Fatalf("start gateway: %v", err)
	}
	f.t.Cleanup(func() { g.Close() })
	f.g = g
	return g
}

// agent is a test agent connected with its own credential, subscribed to
// its agent: topic; every delivery is answered processed and kept.
type agent struct {
	t     *testing.T
	f     *fixture
	name  string
	conn  *peer.Conn
	inbox chan *peer.Delivery
	// last is the payload of the latest delivery expect returned.
	last json.RawMessage
}

// lastResponse returns the response of the latest delivery re-encoded
// with sorted keys, so that a test compares the fields and values the
// gateway wrote, not the order it wrote them in.
func (a *agent) lastResponse() string {
	var m struct{ Response map[string]any }
	if err := json.Unmarshal(a.last, &m); err != nil {
		a.t.Fatal(err)
	}
	data, _ := json.Marshal(m.Response)
	return string(data)
}

func (f *fixture) agent(name string) *agent {
	f.t.Helper()
	return f.dial(name, peer.AgentTopic(name))
}

// dial connects name and collects what arrives on pattern.
func (f *fixture) dial(name, pattern string) *agent {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	conn, err := peer.Dial(ctx, f.srv.URL, &peer.Options{ClientID: name, Token: tokens[name], Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.t.Fatalf("dial %s: %v", name, err)
	}
	a := &agent{t: f.t, f: f, name: name, conn: conn, inbox: make(chan *peer.Delivery, 64)}
	f.t.Cleanup(func() { conn.Close() })
	err = conn.Subscribe(ctx, pattern, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		a.inbox <- d
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		f.t.Fatalf("%s subscribe: %v", name, err)
	}
	return a
}

// reader is agent for a Reader: it first waits for the gateway's
// bcp_subscriptions_active, which comes before anything else.
func (f *fixture) reader(name string) *agent {
	a := f.agent(name)
	a.expect(TypeSubscriptionsActive)
	return a
}

// send publishes payload and returns the gateway's ack.
func (a *agent) send(topic string, payload any) (string, protocol.Ack) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	res, err := a.conn.SendMessage(ctx, topic, payload, nil)
	if err != nil {
		a.t.Fatalf("%s send to %s: %v", a.name, topic, err)
	}
	if len(res.Acks) != 1 {
		a.t.Fatalf("%s send to %s: acks %+v, want the gateway's one", a.name, topic, res.Acks)
	}
	return res.MessageID, res.Acks[0]
}

// query sends a bcp_query_request and requires it accepted; it returns
// the query id.
func (a *agent) query(payload map[string]any) string {
	a.t.Helper()
	_, ack := a.send(TopicQuery, payload)
	if !ack.Processed {
		a.t.Fatalf("query refused: %s", ack.Message)
	}
	id := QueryIDOf(ack.Message)
	if id == "" {
		a.t.Fatalf("the query's ack %q names no query id", ack.Message)
	}
	return id
}

// refused sends payload and requires a refusal starting with code.
func (a *agent) refused(topic string, payload any, code string) protocol.Ack {
	a.t.Helper()
	_, ack := a.send(topic, payload)
	if ack.Processed || !strings.HasPrefix(ack.Message, code+": ") {
		a.t.Fatalf("ack = processed %v, %q; want a refusal starting with %q", ack.Processed, ack.Message, code+": ")
	}
	return ack
}

// expect returns the next delivery, which must be of type typ, decoded
// into a map.
func (a *agent) expect(typ string) map[string]any {
	a.t.Helper()
	return a.expectAfter("", typ)
}

// expectAfter is expect that first skips any number of deliveries of
// type skip (repeated announcements, say).
func (a *agent) expectAfter(skip, typ string) map[string]any {
	a.t.Helper()
	for {
		select {
		case d := <-a.inbox:
			if skip != "" && d.Type() == skip && skip != typ {
				continue
			}
			if d.Type() != typ {
				a.t.Fatalf("%s got %s (%s), want %s", a.name, d.Type(), d.Payload, typ)
			}
			if d.From != "bcp-gateway" {
				a.t.Fatalf("%s got %s from %q, want from the gateway", a.name, typ, d.From)
			}
			a.last = d.Payload
			var m map[string]any
			if err := json.Unmarshal(d.Payload, &m); err != nil {
				a.t.Fatal(err)
			}
			return m
		case <-time.After(bustest.Timeout):
			a.t.Fatalf("%s: no %s within %v", a.name, typ, bustest.Timeout)
		}
	}
}

// quiet requires that the gateway sent a nothing: it waits until the
// gateway has handed every message it queued to the bus, and the bus
// answers a send once the subscribers have it, so anything for a is in
// its inbox by then. The gateway queues a step's messages in the step's
// own commit, before it acks the step, so this covers every step acked
// so far; not what a timer decides later.
func (a *agent) quiet() {
	a.t.Helper()
	if g := a.f.g; g != nil {
		require.Eventually(a.t, func() bool {
			topics, err := g.state.outboxTopics()
			return err == nil && len(topics) == 0
		}, bustest.Timeout, 5*time.Millisecond, "the gateway's outbox to empty")
	}
	select {
	case m := <-a.inbox:
		a.t.Fatalf("%s got %s (%s), want nothing", a.name, m.Type(), m.Payload)
	default:
	}
}

// Specs used by the tests.
func cat1Query(target string) map[string]any {
	return map[string]any{
		"type": TypeQueryRequest, "target": target, "category": 1,
		"fields": []any{
			map[string]any{"name": "is_urgent", "type": "boolean"},
			map[string]any{"name": "sentiment", "type": "enum", "values": []string{"positive", "neutral", "negative"}},
		},
	}
}

func cat2Query(target string, maxWords int) map[string]any {
	return map[string]any{
		"type": TypeQueryRequest, "target": target, "category": 2,
		"questions": []any{map[string]any{"id": "sender", "question": "Who sent it?", "max_words": maxWords, "expected_format": "person_name"}},
	}
}

func answer(queryID string, response any) map[string]any {
	return map[string]any{"type": TypeResponse, "query_id": queryID, "response": response}
}

// logLines is a slog.Handler that keeps every record's level, message
// and attributes, for tests of what the gateway logs.
type logLines struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logLines) WithGroup(string) slog.Handler            { return h }

func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	l := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}

// matching returns the lines whose message contains part.
func (h *logLines) matching(part string) []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logLine
	for _, l := range h.lines {
		if strings.Contains(l.msg, part) {
			out = append(out, l)
		}
	}
	return out
}
