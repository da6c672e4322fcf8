package bus

import (
	"encoding/json"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

// FuzzHTTPBody feeds POST /v1/messages bodies to the parser that checks
// them and to sendMessage's scanner behind it: neither panics, and a body
// the parser takes is a JSON object whose fields the scanner reads as
// json.Unmarshal would.
func FuzzHTTPBody(f *testing.F) {
	for _, seed := range []string{
		`{"topic":"jobs:a","payload":{"type":"t"}}`,
		`{"topic":"jobs:a","payload":{"type":"t"},"meta":{"k":1},"clientId":"cron"}`,
		`{"topic":`, `[1]`, `null`, `""`, `{}`, `{"TOPIC":"x","topic":"y"}`,
		"{\"topic\":\"\xff\"}", `{"payload":{"type":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := parseBody(body)
		if err != nil {
			if code := protocol.CodeOf(err); code != protocol.CodeParseError && code != protocol.CodeInvalidParams {
				t.Fatalf("parseBody(%q): code %d; want a parse or params error", body, code)
			}
			return
		}
		if !json.Valid(got) || !protocol.IsObject(got) {
			t.Fatalf("parseBody(%q) took what is not a JSON object", body)
		}
		p, _, err := protocol.ScanSendMessage(got)
		var want protocol.SendMessageParams
		if json.Unmarshal(got, &want) == nil && err == nil && p.Topic != want.Topic {
			t.Fatalf("body %q: scanned topic %q; json.Unmarshal reads %q", body, p.Topic, want.Topic)
		}
	})
}

// TestHTTPPublishersLRU: the HTTP publisher table forgets, past an
// identity's bound, that identity's least recently used publisher,
// never another identity's and never all at once.
func TestHTTPPublishersLRU(t *testing.T) {
	t.Parallel()
	s, err := New(&Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	var h httpPublishers
	keep := func(identity, clientID string) *Publisher {
		p := s.NewPublisher(clientID, identity, "test")
		return h.keep(httpPublisherKey{identity: identity, clientID: clientID}, p, 3)
	}
	other := keep("other", "o")
	a := keep("slow", "slow-a")
	keep("slow", "slow-b")
	keep("slow", "slow-c")
	// slow-a is used again: slow-b is now the least recent.
	a.used.Add(1 << 40)
	keep("slow", "slow-d")
	if len(h.all) != 4 {
		t.Fatalf("%d publishers kept, want 4: other's and slow's 3", len(h.all))
	}
	for _, k := range []httpPublisherKey{{"other", "o"}, {"slow", "slow-a"}, {"slow", "slow-c"}, {"slow", "slow-d"}} {
		if h.all[k] == nil {
			t.Errorf("%v was forgotten", k)
		}
	}
	if got := keep("other", "o"); got != other {
		t.Error("other's publisher was made again: it had been forgotten")
	}
}
