package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/bcp/agent"
	"github.com/bub-bus/bub/bcp/gateway"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
)

const mainDef = `---
name: main
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 60
    subscriptions:
      - id: alerts
        max_pushes_per_hour: 5
        category: 1
        fields:
          - name: urgent
            type: boolean
  - peer: scraper
    role: controller
    max_category: 3
    budget_bits: 5000
    max_cat3_queries: 1
---
`

const scraperDef = `---
name: scraper
base_taint: high
bcp_channels:
  - peer: main
    role: reader
    max_category: 3
    budget_bits: 5000
---
`

const researcherDef = `---
name: researcher
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 60
---
`

func hash(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// setup starts a bus with auth on and a gateway, and returns the bus URL.
func setup(t *testing.T) string {
	t.Helper()
	identity := func(name string, pub, sub []string) auth.Identity {
		return auth.Identity{Name: name, TokenSHA256: hash(name), Grant: auth.Grant{
			ClientIDs: []string{name}, Publish: auth.Rules{Allow: pub}, Subscribe: auth.Rules{Allow: sub},
		}}
	}
	authn, err := auth.New(auth.Config{Identities: []auth.Identity{
		identity("main", []string{"bcp:*"}, []string{"agent:{{clientId}}"}),
		identity("researcher", []string{"bcp:*"}, []string{"agent:{{clientId}}"}),
		identity("scraper", []string{"bcp:*"}, []string{"agent:{{clientId}}"}),
		identity("alice", []string{"bcp:approval"}, nil),
		identity("bcp-gateway", []string{"agent:*", "bcp:approval.requested.*"}, []string{"bcp:*", "system:client.*"}),
	}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Start(t, &bus.Options{Auth: authn})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.md"), []byte(mainDef), 0o600)
	os.WriteFile(filepath.Join(dir, "researcher.md"), []byte(researcherDef), 0o600)
	os.WriteFile(filepath.Join(dir, "scraper.md"), []byte(scraperDef), 0o600)
	defs, err := bcp.LoadDefinitions(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.Start(t.Context(), gateway.Options{
		BusURL: srv.URL, Token: "bcp-gateway", Definitions: defs, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
		Approvers: []string{"alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return srv.URL
}

func dial(t *testing.T, url, name string) *peer.Conn {
	t.Helper()
	conn, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: name, Token: name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// controllerFor connects main as a Controller whose deliveries go to
// deliveries.
func controllerFor(t *testing.T, ctx context.Context, url string, deliveries chan<- *gateway.ResponseDelivery) *agent.Controller {
	t.Helper()
	conn := dial(t, url, "main")
	controller := agent.NewController(conn)
	if err := conn.Subscribe(ctx, "agent:main", controller.Handler("bcp-gateway", agent.ControllerHandler{
		OnDelivery: func(_ context.Context, d *gateway.ResponseDelivery) error { deliveries <- d; return nil },
	}), nil); err != nil {
		t.Fatal(err)
	}
	return controller
}

// A Controller queries through the SDK; a Reader answers from its query
// handler; the Controller's handler gets the normalized answer, and a
// refusal comes back as a *RefusedError with its code.
func TestControllerAndReader(t *testing.T) {
	url := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	deliveries := make(chan *gateway.ResponseDelivery, 4)
	controller := controllerFor(t, ctx, url, deliveries)

	readerConn := dial(t, url, "researcher")
	reader := agent.NewReader(readerConn)
	subsSeen := make(chan []bcp.ActiveSubscription, 1)
	if err := readerConn.Subscribe(ctx, "agent:researcher", reader.Handler("bcp-gateway", agent.ReaderHandler{
		OnSubscriptions: func(_ context.Context, s []bcp.ActiveSubscription) error { subsSeen <- s; return nil },
		OnQuery: func(ctx context.Context, q *gateway.QueryMessage) error {
			_, err := reader.Respond(ctx, q.QueryID, map[string]string{"who": "  Ada   LOVELACE"})
			return err
		},
	}), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case subs := <-subsSeen:
		if len(subs) != 1 || subs[0].ID != "alerts" || subs[0].Controller != "main" || subs[0].MaxPushesPerHour != 5 || subs[0].Spec.Category != bcp.Structured {
			t.Fatalf("subscriptions = %+v", subs)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("no bcp_subscriptions_active")
	}
	if got := reader.Subscriptions(); len(got) != 1 {
		t.Fatalf("Subscriptions() = %+v", got)
	}

	spec, err := bcp.ParseSpec([]byte(`{"category": 2, "questions": [{"id": "who", "question": "Who?", "max_words": 5, "expected_format": "person_name"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	id, err := controller.Query(ctx, "researcher", spec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-deliveries:
		if d.QueryID != id || string(d.Response) != `{"who":"ada lovelace"}` {
			t.Fatalf("delivery = %+v (%s)", d, d.Response)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("no delivery")
	}

	// 55 of 60 bits are spent: the next query is refused with its code.
	_, err = controller.Query(ctx, "researcher", spec)
	var refused *agent.RefusedError
	if !errors.As(err, &refused) || refused.Code != "budget_exhausted" {
		t.Fatalf("second query: %v, want a budget_exhausted refusal", err)
	}
	if _, err := reader.Publish(ctx, "main", "alerts", map[string]bool{"urgent": true}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	select {
	case d := <-deliveries:
		if d.SubscriptionID != "alerts" {
			t.Fatalf("delivery = %+v", d)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("no publish delivery")
	}
	if err := controller.StartSession(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := controller.Query(ctx, "researcher", spec); err != nil {
		t.Fatalf("query after a new session: %v", err)
	}
}

// Escalate sends a Category-3 query: refused without a justification;
// with one it waits for a human, reaches the Reader once approved, and
// the summary reaches the Controller's handler only after a second
// approval.
func TestControllerEscalate(t *testing.T) {
	url := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	deliveries := make(chan *gateway.ResponseDelivery, 1)
	controller := controllerFor(t, ctx, url, deliveries)
	queries := make(chan *gateway.QueryMessage, 1)
	answers := make(chan string, 1)
	scraperConn := dial(t, url, "scraper")
	scraper := agent.NewReader(scraperConn)
	if err := scraperConn.Subscribe(ctx, "agent:scraper", scraper.Handler("bcp-gateway", agent.ReaderHandler{
		OnQuery: func(ctx context.Context, q *gateway.QueryMessage) error {
			queries <- q
			msg, err := scraper.Respond(ctx, q.QueryID, map[string]string{"summary": "The Memo asks for a MEETING."})
			answers <- msg
			return err
		},
	}), nil); err != nil {
		t.Fatal(err)
	}
	alice := dial(t, url, "alice")
	approve := func(id string) {
		t.Helper()
		res, err := alice.SendMessage(ctx, gateway.TopicApproval, map[string]string{"type": gateway.TypeApprovalDecision, "approval_id": id, "decision": "approve"}, nil)
		if err != nil || len(res.Acks) != 1 || !res.Acks[0].Processed {
			t.Fatalf("approve %s: %v %+v", id, err, res)
		}
	}

	spec, err := bcp.ParseSpec([]byte(`{"category": 3, "directive": "Summarize the memo.", "max_words": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = controller.Escalate(ctx, "scraper", spec, "")
	var refused *agent.RefusedError
	if !errors.As(err, &refused) || refused.Code != gateway.CodeJustificationRequired {
		t.Fatalf("escalation without a justification: %v, want %s", err, gateway.CodeJustificationRequired)
	}
	id, err := controller.Escalate(ctx, "scraper", spec, "the memo has no structure to ask about")
	if err != nil {
		t.Fatal(err)
	}
	approve(gateway.KindEscalation + "-" + id)
	select {
	case q := <-queries:
		if q.QueryID != id || q.Category != 3 || q.Spec.Directive != "Summarize the memo." {
			t.Fatalf("query = %+v", q)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("the approved escalation did not reach the Reader")
	}
	// The gateway holds the summary for review: its ack says so.
	if msg := <-answers; !strings.Contains(msg, "awaiting a reviewer's approval") {
		t.Fatalf("the summary's ack = %q, want it held for review", msg)
	}
	approve(gateway.KindSummary + "-" + id)
	select {
	case d := <-deliveries:
		if d.QueryID != id || d.Category != 3 || string(d.Response) != `{"summary":"the memo asks for a meeting."}` {
			t.Fatalf("delivery = %+v (%s)", d, d.Response)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("no delivery of the approved summary")
	}
	if _, err := controller.Escalate(ctx, "scraper", spec, "again"); !errors.As(err, &refused) || refused.Code != string(bcp.CodeCat3QueriesExhausted) {
		t.Fatalf("second escalation: %v, want the cat3 limit", err)
	}
}

// A gateway message that overtakes the Reader's first list is sent back
// to the bus to retry; once the list came, it is handled.
func TestReaderWaitsForItsList(t *testing.T) {
	reader := agent.NewReader(nil)
	var got []string
	h := reader.Handler("bcp-gateway", agent.ReaderHandler{
		OnQuery: func(_ context.Context, q *gateway.QueryMessage) error { got = append(got, q.QueryID); return nil },
	})
	query := &peer.Delivery{From: "bcp-gateway", Payload: []byte(`{"type":"bcp_query","query_id":"q1","controller":"main","category":1,"spec":{"category":1,"fields":[{"name":"ok","type":"boolean"}]}}`)}
	res, err := h(t.Context(), query)
	if err != nil || res.Processed || !res.ShouldRetry || len(got) != 0 {
		t.Fatalf("query before the list: %+v, %v, handled %v; want should_retry and not handled", res, err, got)
	}
	list := &peer.Delivery{From: "bcp-gateway", Payload: []byte(`{"type":"bcp_subscriptions_active","subscriptions":[]}`)}
	if res, err := h(t.Context(), list); err != nil || !res.Processed {
		t.Fatalf("list: %+v, %v", res, err)
	}
	if res, err := h(t.Context(), query); err != nil || !res.Processed || len(got) != 1 {
		t.Fatalf("query after the list: %+v, %v, handled %v", res, err, got)
	}
}
