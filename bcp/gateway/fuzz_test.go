package gateway

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bub-bus/bub/bcp"
	"github.com/bub-bus/bub/peer"
)

// FuzzHandlers feeds arbitrary payloads, from a Controller and from a
// Reader, to the gateway's handlers: they must never panic, and every
// answer is processed or a refusal that starts with a code.
func FuzzHandlers(f *testing.F) {
	for _, seed := range []string{
		`{"type":"bcp_query_request","target":"researcher","category":1,"fields":[{"name":"a","type":"boolean"}]}`,
		`{"type":"bcp_query_request","target":"researcher","category":2,"questions":[{"id":"q","question":"?","max_words":3,"expected_format":"date"}]}`,
		`{"type":"bcp_query_request","target":"scraper","category":3,"directive":"x","max_words":5,"justification":"j"}`,
		`{"type":"bcp_session_start"}`,
		`{"type":"bcp_response","query_id":"m-1","response":{"a":true}}`,
		`{"type":"bcp_response","subscription_id":"alerts","controller":"main","response":{"urgent":true,"priority":"low"}}`,
		`{"type":"bcp_response","query_id":"m-1","subscription_id":"x","response":[]}`,
		`{"type":"bcp_response","query_id":1}`,
		`[]`, `null`, `{"type":"bcp_query_request","target":"researcher","category":1e400}`,
		`{"type":"bcp_query_request","target":"scraper","category":3,"directive":"x","max_words":5,"justification":"j"}`,
		`{"type":"bcp_approval_decision","approval_id":"escalation-m-1","decision":"approve"}`,
		`{"type":"bcp_approval_decision","approval_id":"summary-m-1","decision":"edit","summary":"s"}`,
		`{"type":"bcp_approval_list"}`,
	} {
		for who := range uint8(3) {
			f.Add(seed, who)
		}
	}
	g := fuzzGateway(f)
	ids := 0
	f.Fuzz(func(t *testing.T, payload string, who uint8) {
		// The Controller queries, the Reader answers, the approver
		// decides; each may send anything.
		from, handler := "researcher", g.onResponse
		switch who % 3 {
		case 1:
			from, handler = "main", g.onQuery
		case 2:
			from, handler = "alice", g.onApproval
		}
		ids++
		// The first message id is reused, so responses find a query.
		id := "m-1"
		if ids > 1 {
			id = "m-" + strings.Repeat("x", ids%7) + string(rune('a'+ids%26))
		}
		d := &peer.Delivery{Topic: TopicQuery, MessageID: id, From: from, Payload: []byte(payload)}
		res, err := handler(context.Background(), d)
		if err != nil {
			t.Fatalf("handler error %v", err)
		}
		if !res.Processed && !res.ShouldRetry && !strings.Contains(res.Message, ": ") {
			t.Fatalf("refusal without a code: %q", res.Message)
		}
	})
}

// fuzzGateway is a gateway with state and definitions but no bus
// connection: handlers only queue what they send.
func fuzzGateway(f *testing.F) *Gateway {
	dir := f.TempDir()
	for name, text := range testAgents {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	defs, err := bcp.LoadDefinitions(dir)
	if err != nil {
		f.Fatal(err)
	}
	reg, err := bcp.NewRegistry(defs)
	if err != nil {
		f.Fatal(err)
	}
	st, err := openState(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.close() })
	st.db.NoSync = true // durability is not under test; speed is
	opts := Options{Definitions: defs, DataDir: dir, Logger: slog.New(slog.DiscardHandler), Approvers: []string{"alice"}}
	opts.setDefaults()
	return &Gateway{opts: opts, log: opts.Logger, registry: reg, state: st, approvers: map[string]bool{"alice": true},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// FuzzDecode checks the decoders alone: no panic, and what they accept
// is complete.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"bcp_query_request","target":"r","category":1,"fields":[{"name":"a","type":"boolean"}]}`))
	f.Add([]byte(`{"type":"bcp_response","subscription_id":"s","controller":"c","response":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if q, err := DecodeQueryRequest(data); err == nil {
			if q.Target == "" || q.Spec == nil || q.Spec.Check() != nil {
				t.Fatalf("accepted an incomplete request: %+v", q)
			}
		}
		if r, err := DecodeResponse(data); err == nil {
			if (r.QueryID == "") == (r.SubscriptionID == "") || len(r.Response) == 0 {
				t.Fatalf("accepted an incomplete response: %+v", r)
			}
		}
	})
}
