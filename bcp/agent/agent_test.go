package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
		identity("bcp-gateway", []string{"agent:*"}, []string{"bcp:*", "system:client.connected", "system:client.subscribed"}),
	}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Start(t, &bus.Options{Auth: authn})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.md"), []byte(mainDef), 0o600)
	os.WriteFile(filepath.Join(dir, "researcher.md"), []byte(researcherDef), 0o600)
	defs, err := bcp.LoadDefinitions(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.Start(t.Context(), gateway.Options{
		BusURL: srv.URL, Token: "bcp-gateway", Definitions: defs, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
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

// A Controller queries through the SDK; a Reader answers from its query
// handler; the Controller's handler gets the normalized answer, and a
// refusal comes back as a *RefusedError with its code.
func TestControllerAndReader(t *testing.T) {
	url := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()

	deliveries := make(chan *gateway.ResponseDelivery, 4)
	mainConn := dial(t, url, "main")
	controller := agent.NewController(mainConn)
	if err := mainConn.Subscribe(ctx, "agent:main", controller.Handler("bcp-gateway", agent.ControllerHandler{
		OnDelivery: func(_ context.Context, d *gateway.ResponseDelivery) error { deliveries <- d; return nil },
	}), nil); err != nil {
		t.Fatal(err)
	}

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
