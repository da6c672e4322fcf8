package gateway

import (
	"strings"
	"testing"
)

// A relay decides only for the humans listed for it, and says which one
// in on_behalf_of; the audit log names the human and the relay, whether
// the decision counted or not.
func TestRelayDecidesForListedUsersOnly(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(func(o *Options) { o.Relays = map[string][]string{"telegram": {"42", "tg:43"}} })
	main := f.agent("main")
	scraper := f.reader("scraper")
	relay := f.dial("telegram", ApprovalTopic("telegram"))

	// A relay alone is enough for Category 3.
	id := main.query(cat3Query("the report has no structure to ask about"))
	if req := relay.expect(TypeApprovalRequest); req["approval_id"] != "escalation-"+id {
		t.Fatalf("request = %v", req)
	}
	esc := "escalation-" + id

	ack := relay.refused(TopicApproval, decision(esc, "approve"), CodeNotAnApprover)
	if !strings.Contains(ack.Message, "on_behalf_of") {
		t.Fatalf("relay without on_behalf_of: %s", ack.Message)
	}
	ack = relay.refused(TopicApproval, decision(esc, "approve", "on_behalf_of", "tg:7"), CodeNotAnApprover)
	if !strings.Contains(ack.Message, "tg:7 is not an approver listed for relay telegram") {
		t.Fatalf("relay for an unlisted user: %s", ack.Message)
	}
	// "tg:43" is listed with its scheme: another scheme's 43 is not it.
	relay.refused(TopicApproval, decision(esc, "approve", "on_behalf_of", "slack:43"), CodeNotAnApprover)
	relay.refused(TopicApproval, decision(esc, "approve", "on_behalf_of", "tg:4 2"), CodeMalformed)
	// An agent cannot pose as a relay, nor claim a listed human.
	main.refused(TopicApproval, decision(esc, "approve", "on_behalf_of", "tg:42"), CodeNotAnApprover)
	scraper.quiet()

	_, ok := relay.send(TopicApproval, decision(esc, "approve", "on_behalf_of", "tg:42"))
	if !ok.Processed {
		t.Fatalf("relay for tg:42: %+v", ok)
	}
	if q := scraper.expect(TypeQuery); q["query_id"] != id {
		t.Fatalf("bcp_query = %v", q)
	}

	// The summary, rejected for tg:43 (listed with its scheme).
	scraper.send(TopicResponse, answer(id, map[string]any{"summary": "a summary"}))
	if c := relay.expect(TypeApprovalClosed); c["decided_by"] != "tg:42 via telegram" {
		t.Fatalf("bcp_approval_closed = %v", c)
	}
	relay.expect(TypeApprovalRequest)
	if _, ack := relay.send(TopicApproval, decision("summary-"+id, "reject", "on_behalf_of", "tg:43", "reason", "no")); !ack.Processed {
		t.Fatalf("reject for tg:43: %+v", ack)
	}
	if failed := main.expect(TypeQueryFailed); failed["code"] != CodeApprovalRejected {
		t.Fatalf("bcp_query_failed = %v", failed)
	}

	records, err := g.Audit(0)
	if err != nil {
		t.Fatal(err)
	}
	var refusedFor7, approvedFor42, rejectedFor43 bool
	for _, r := range records {
		if r.Event != "approval" || r.From != "telegram" {
			continue
		}
		switch {
		case r.OnBehalfOf == "tg:7" && r.Outcome == CodeNotAnApprover:
			refusedFor7 = true
		case r.OnBehalfOf == "tg:42" && r.Outcome == "ok" && r.Detail == "approve "+esc:
			approvedFor42 = true
		case r.OnBehalfOf == "tg:43" && r.Outcome == "ok" && r.Detail == "reject summary-"+id:
			rejectedFor43 = true
		}
	}
	if !refusedFor7 || !approvedFor42 || !rejectedFor43 {
		t.Fatalf("audit: refused tg:7 %v, approved tg:42 %v, rejected tg:43 %v; records %+v", refusedFor7, approvedFor42, rejectedFor43, records)
	}
}

// An approver decides for itself only; a relay must list someone and be
// neither an agent nor an approver.
func TestRelayConfiguration(t *testing.T) {
	f := newFixture(t)
	f.gateway(func(o *Options) {
		o.Approvers = []string{"alice"}
		o.Relays = map[string][]string{"telegram": {"42"}}
	})
	main := f.agent("main")
	f.reader("scraper")
	alice := f.dial("alice", ApprovalTopic("alice"))
	id := main.query(cat3Query("needed"))
	alice.expect(TypeApprovalRequest)
	ack := alice.refused(TopicApproval, decision("escalation-"+id, "approve", "on_behalf_of", "tg:42"), CodeNotAnApprover)
	if !strings.Contains(ack.Message, "alice is not a relay") {
		t.Fatalf("approver with on_behalf_of: %s", ack.Message)
	}

	for _, tc := range []struct {
		relays    map[string][]string
		approvers []string
		want      string
	}{
		{map[string][]string{"telegram": nil}, nil, `relay "telegram" lists no users`},
		{map[string][]string{"main": {"42"}}, nil, `relay "main" is an agent`},
		{map[string][]string{"alice": {"42"}}, []string{"alice"}, `"alice" is both an approver and a relay`},
		{map[string][]string{"telegram": {"4 2"}}, nil, `relay "telegram": user "4 2"`},
	} {
		_, err := Start(t.Context(), Options{BusURL: f.srv.URL, Token: tokens["bcp-gateway"], Definitions: f.defs, DataDir: t.TempDir(),
			Approvers: tc.approvers, Relays: tc.relays})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start with relays %v: %v, want %q", tc.relays, err, tc.want)
		}
	}
}
