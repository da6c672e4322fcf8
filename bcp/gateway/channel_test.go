package gateway

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// What a Reader hid in its raw answer does not reach the Controller:
// answers that differ only in which invisible characters they hold (or
// in their order) are delivered as the same bytes, for queries and for
// pushes alike, and the code points go to the audit log only.
func TestInvisibleCharactersReachOnlyTheAudit(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(nil)
	main := f.agent("main")
	researcher := f.reader("researcher")

	// The Controller's view of a delivery: everything but its query id.
	seen := func() string {
		del := main.expect(TypeResponseDelivery)
		delete(del, "query_id")
		data, _ := json.Marshal(del)
		return string(data)
	}
	var queried []string
	for _, name := range []string{"Jane\U000F0000\U000FFC01 Smith", "Jane\U000E0061\U00100004 Smith"} {
		id := main.query(cat2Query("researcher", 5))
		researcher.expect(TypeQuery)
		researcher.send(TopicResponse, answer(id, map[string]any{"sender": name}))
		researcher.expect(TypeValidationResult)
		queried = append(queried, seen())
	}
	if queried[0] != queried[1] {
		t.Fatalf("the Controller tells two answers apart by their invisible characters:\n%s\n%s", queried[0], queried[1])
	}
	if !strings.Contains(queried[0], `"kind":"invisible"`) || strings.Contains(queried[0], "U+") {
		t.Fatalf("delivery %s: want the invisible kind flagged, and no code point", queried[0])
	}
	// findings counts as a Category-2 query: a new session makes room.
	main.send(TopicQuery, map[string]any{"type": TypeSessionStart})
	var pushed []string
	for _, topic := range []string{"solar\u200b\u202e power", "solar\u202e\u200b power"} {
		researcher.send(TopicResponse, map[string]any{"type": TypeResponse, "subscription_id": "findings", "controller": "main",
			"response": map[string]any{"topic": topic}})
		researcher.expect(TypeValidationResult)
		pushed = append(pushed, seen())
	}
	if pushed[0] != pushed[1] || strings.Contains(pushed[0], "U+") {
		t.Fatalf("pushes reach the Controller as\n%s\n%s\nwant the same bytes, and no code point", pushed[0], pushed[1])
	}
	records, err := g.Audit(0)
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, r := range records {
		if r.Event == "delivery" || r.Event == "publish" {
			details = append(details, r.Detail)
		}
	}
	want := []string{"sender invisible: U+F0000 U+FFC01", "sender invisible: U+E0061 U+100004", "topic invisible: U+200B U+202E", "topic invisible: U+202E U+200B"}
	if strings.Join(details, "|") != strings.Join(want, "|") {
		t.Fatalf("audit details = %q, want %q", details, want)
	}
}

// A homoglyph (a Cyrillic letter in a Latin name) would reach the
// Controller as written under the flag policy: the gateway refuses the
// answer instead, and the Reader hears why.
func TestHomoglyphAnswerRefused(t *testing.T) {
	f := newFixture(t)
	f.gateway(nil)
	main := f.agent("main")
	researcher := f.reader("researcher")
	id := main.query(cat2Query("researcher", 5))
	researcher.expect(TypeQuery)
	researcher.refused(TopicResponse, answer(id, map[string]any{"sender": "J\u0430ne Smith"}), "mixed_script")
	if vr := researcher.expect(TypeValidationResult); vr["code"] != "mixed_script" {
		t.Fatalf("validation result = %v, want mixed_script", vr)
	}
	researcher.send(TopicResponse, answer(id, map[string]any{"sender": "Jane Smith"}))
	researcher.expect(TypeValidationResult)
	main.expect(TypeResponseDelivery)
	if resp := main.lastResponse(); resp != `{"sender":"jane smith"}` {
		t.Fatalf("delivered %s", resp)
	}
}

// Every envelope the gateway reads is decoded strictly: a duplicate key,
// at the top or inside, is malformed, as in the spec itself, whichever
// value the last-wins reading would have picked.
func TestEnvelopesRefuseDuplicateKeys(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(func(o *Options) { o.Approvers = []string{"alice"} })
	main := f.agent("main")
	researcher := f.reader("researcher")
	alice := f.dial("alice", ApprovalTopic("alice"))
	id := main.query(cat1Query("researcher"))
	researcher.expect(TypeQuery)
	tests := []struct {
		name    string
		sender  *agent
		topic   string
		payload string
	}{
		{"query: category twice", main, TopicQuery,
			`{"type":"bcp_query_request","target":"researcher","category":2,"category":1,"fields":[{"name":"a","type":"boolean"}]}`},
		{"query: target twice", main, TopicQuery,
			`{"type":"bcp_query_request","target":"scraper","target":"researcher","category":1,"fields":[{"name":"a","type":"boolean"}]}`},
		{"query: type twice", main, TopicQuery,
			`{"type":"bcp_query_request","type":"bcp_session_start"}`},
		{"session start: type twice", main, TopicQuery,
			`{"type":"bcp_session_start","type":"bcp_session_start"}`},
		{"response: response twice", researcher, TopicResponse,
			`{"type":"bcp_response","query_id":"` + id + `","response":{"is_urgent":true,"sentiment":"neutral"},"response":{"is_urgent":false,"sentiment":"negative"}}`},
		{"response: query_id twice", researcher, TopicResponse,
			`{"type":"bcp_response","query_id":"x","query_id":"` + id + `","response":{"is_urgent":true,"sentiment":"neutral"}}`},
		{"response: a nested duplicate", researcher, TopicResponse,
			`{"type":"bcp_response","query_id":"` + id + `","response":{"is_urgent":true,"sentiment":"neutral","sentiment":"negative"}}`},
		{"decision: decision twice", alice, TopicApproval,
			`{"type":"bcp_approval_decision","approval_id":"escalation-x","decision":"reject","decision":"approve"}`},
		{"list: type twice", alice, TopicApproval,
			`{"type":"bcp_approval_list","type":"bcp_approval_list"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ack := tt.sender.refused(tt.topic, json.RawMessage(tt.payload), CodeMalformed)
			if !strings.Contains(ack.Message, "duplicate key") {
				t.Errorf("ack %q: want it to name the duplicate key", ack.Message)
			}
		})
	}
	if u, _ := g.Usage("main", "researcher"); math.Abs(float64(u.SpentBits)-(1+math.Log2(3))) > 1e-9 {
		t.Fatalf("usage = %+v: a refused envelope charged bits", u)
	}
	// The query is still open for a well-formed answer.
	researcher.send(TopicResponse, answer(id, map[string]any{"is_urgent": true, "sentiment": "neutral"}))
	main.expect(TypeResponseDelivery)
}

// Query ids are unguessable, and a Reader answering a query that is not
// its own hears exactly what it hears for one that does not exist; the
// audit log still says what happened.
func TestQueryIDsRevealNothing(t *testing.T) {
	f := newFixture(t)
	g := f.gateway(nil)
	main := f.agent("main")
	researcher := f.reader("researcher")
	scraper := f.reader("scraper")

	first := main.query(cat1Query("researcher"))
	second := main.query(cat1Query("scraper"))
	researcher.expect(TypeQuery)
	scraper.expect(TypeQuery)
	msgID, _ := main.send(TopicQuery, cat1Query("researcher"))
	third := researcher.expect(TypeQuery)["query_id"].(string)
	for _, id := range []string{first, second, third} {
		if !strings.HasPrefix(id, "q-") || len(id) != 34 || id == msgID {
			t.Fatalf("query id %q: want q- and 128 random bits in hex, not the bus's messageId %q", id, msgID)
		}
	}

	// scraper's own query is answered; researcher's are not its own.
	scraper.send(TopicResponse, answer(second, map[string]any{"is_urgent": true, "sentiment": "neutral"}))
	scraper.expect(TypeValidationResult)
	main.expect(TypeResponseDelivery)
	// The refusal of someone else's open query, of someone else's
	// answered query, and of no query at all differ only in the id quoted.
	researcher.send(TopicResponse, answer(first, map[string]any{"is_urgent": true, "sentiment": "neutral"}))
	researcher.expect(TypeValidationResult)
	main.expect(TypeResponseDelivery)
	probe := func(id string) string {
		ack := scraper.refused(TopicResponse, answer(id, map[string]any{"is_urgent": true, "sentiment": "neutral"}), CodeUnknownQuery)
		return strings.ReplaceAll(ack.Message, id, "ID")
	}
	open, closed, none := probe(third), probe(first), probe("q-00000000000000000000000000000000")
	if open != none || closed != none {
		t.Fatalf("refusals tell queries apart:\nopen   %q\nclosed %q\nnone   %q", open, closed, none)
	}
	records, _ := g.Audit(0)
	probes := 0
	for _, r := range records {
		if r.Outcome == CodeNotYourQuery && r.From == "scraper" && (r.QueryID == first || r.QueryID == third) {
			probes++
		}
	}
	if probes != 2 {
		t.Fatalf("%d audit records of scraper answering researcher's queries, want 2", probes)
	}
	// No bcp_validation_result went to scraper for any probe: what the
	// gateway sends it next is a new query.
	main.query(cat1Query("scraper"))
	scraper.expect(TypeQuery)
}
