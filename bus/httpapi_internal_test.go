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
