package eval

import (
	"strings"
	"testing"
)

// FuzzReplyObject: a model's reply, network input, never panics the cut,
// and what comes out is braced.
func FuzzReplyObject(f *testing.F) {
	for _, s := range []string{"", "{}", "Here:\n```json\n{\"a\": 1}\n```", "}{", "{ { }", "no json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		obj, err := replyObject(content)
		if err == nil && (!strings.HasPrefix(obj, "{") || !strings.HasSuffix(obj, "}")) {
			t.Fatalf("replyObject(%q) = %q", content, obj)
		}
	})
}

// FuzzRawStrings: the decoder's reading of delivered bytes never panics,
// and names no key twice more than the bytes do.
func FuzzRawStrings(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"x","b":true}`, `{"a":`, `[1]`, `{"a":{"b":"c"}}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		texts, order := rawStrings(raw)
		if len(texts) > len(order) {
			t.Fatalf("%d strings from %d keys in %q", len(texts), len(order), raw)
		}
	})
}
