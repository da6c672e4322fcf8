package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/bub-bus/bub/bus"
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
// never another identity's and never all at once; past the table's
// bound, the least recently used of all.
func TestHTTPPublishersLRU(t *testing.T) {
	t.Parallel()
	s, err := bus.New(&bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	var h publishers
	keep := func(identity, clientID string, perIdentity int) *bus.Publisher {
		return h.get(publisherKey{identity: identity, clientID: clientID}, perIdentity, func() *bus.Publisher {
			return s.NewPublisher(clientID, identity, "test")
		})
	}
	other := keep("other", "o", 3)
	a := keep("slow", "slow-a", 3)
	keep("slow", "slow-b", 3)
	keep("slow", "slow-c", 3)
	// slow-a is used again: slow-b is now the least recent.
	if keep("slow", "slow-a", 3) != a {
		t.Fatal("slow-a was made again")
	}
	keep("slow", "slow-d", 3)
	if len(h.by) != 4 {
		t.Fatalf("%d publishers kept, want 4: other's and slow's 3", len(h.by))
	}
	for _, k := range []publisherKey{{"other", "o"}, {"slow", "slow-a"}, {"slow", "slow-c"}, {"slow", "slow-d"}} {
		if h.by[k] == nil {
			t.Errorf("%v was forgotten", k)
		}
	}
	if got := keep("other", "o", 3); got != other {
		t.Error("other's publisher was made again: it had been forgotten")
	}
	// An identity bound of one replaces its only publisher each time.
	keep("one", "x", 1)
	keep("one", "y", 1)
	if h.by[publisherKey{"one", "x"}] != nil || h.by[publisherKey{"one", "y"}] == nil || h.mine["one"].Len() != 1 {
		t.Error("bound 1: want y alone kept for one")
	}
	// Past maxPublishers in all, the least recently used of all goes:
	// slow-c, as other and slow-a were used since.
	for i := len(h.by); i < maxPublishers; i++ {
		keep("many", string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('0'+i/260)), -1)
	}
	if len(h.by) != maxPublishers {
		t.Fatalf("%d kept, want %d", len(h.by), maxPublishers)
	}
	keep("last", "z", -1)
	if len(h.by) != maxPublishers || h.by[publisherKey{"slow", "slow-c"}] != nil {
		t.Errorf("past the table's bound: %d kept, slow-c kept %v; want %d, slow-c forgotten", len(h.by), h.by[publisherKey{"slow", "slow-c"}] != nil, maxPublishers)
	}
}
