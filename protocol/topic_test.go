package protocol_test

import (
	"strings"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

func TestParsePattern(t *testing.T) {
	tests := []struct {
		pattern string
		kind    protocol.PatternKind
		matches []string
		misses  []string
		err     string
	}{
		{pattern: "inbound:chat-1", kind: protocol.Exact, matches: []string{"inbound:chat-1"}, misses: []string{"inbound:chat-10", "inbound:chat-"}},
		{pattern: "inbound:chat-", kind: protocol.Prefix, matches: []string{"inbound:chat-", "inbound:chat-1", "inbound:chat-1:x"}, misses: []string{"inbound:chat", "inbound:cha"}},
		{pattern: "inbound:", kind: protocol.Prefix, matches: []string{"inbound:", "inbound:a:b"}, misses: []string{"inbound", "outbound:a"}},
		{pattern: "inbound:*", kind: protocol.Glob, matches: []string{"inbound:", "inbound:a", "inbound:a:b"}, misses: []string{"inbound", "xinbound:a"}},
		{pattern: "tg:?", kind: protocol.Glob, matches: []string{"tg:1", "tg:é"}, misses: []string{"tg:", "tg:12"}},
		{pattern: "tg:[0-9]", kind: protocol.Glob, matches: []string{"tg:5"}, misses: []string{"tg:a"}},
		{pattern: "tg:[!0-9]", kind: protocol.Glob, matches: []string{"tg:a"}, misses: []string{"tg:5"}},
		{pattern: "*:done", kind: protocol.Glob, matches: []string{"task:done", "a:b:done"}, misses: []string{"task:done:x"}},
		{pattern: "", err: "required"},
		{pattern: "a b", err: "whitespace"},
		{pattern: "a\x00", err: "control"},
		{pattern: "a:{b,c}", err: "reserved"},
		{pattern: `a\*`, err: "reserved"},
		{pattern: "a:[b", err: `"a:[b"`},
		{pattern: strings.Repeat("a", protocol.MaxTopicBytes+1), err: "more than"},
		{pattern: "\xff", err: "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := protocol.ParsePattern(tt.pattern)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParsePattern(%q) error = %v, want one containing %q", tt.pattern, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind() != tt.kind {
				t.Errorf("kind = %v, want %v", p.Kind(), tt.kind)
			}
			for _, topic := range tt.matches {
				if !p.Match(topic) {
					t.Errorf("%q does not match %q", tt.pattern, topic)
				}
			}
			for _, topic := range tt.misses {
				if p.Match(topic) {
					t.Errorf("%q matches %q", tt.pattern, topic)
				}
			}
		})
	}
}

func TestValidateTopic(t *testing.T) {
	for _, ok := range []string{"tg:123", "agent:a-b_c.d", "outbound:chat-1", "système:é"} {
		if err := protocol.ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a*", "a?", "a[1]", "a b", "a\n", "{a}", `a\b`} {
		if err := protocol.ValidateTopic(bad); err == nil {
			t.Errorf("ValidateTopic(%q) accepted", bad)
		}
	}
}

// FuzzPattern: compiling never panics, a pattern's literal head starts
// every topic it matches, and a topic that validates matches itself as an
// exact or prefix pattern.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"inbound:*", "tg:[0-9]?", "a:", "a-", "x*x", "[!a]", "[", "**", "a:[]]"} {
		f.Add(s, "inbound:abc")
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := protocol.ParsePattern(pattern)
		if err != nil {
			return
		}
		if p.Match(topic) && !strings.HasPrefix(topic, p.Literal()) {
			t.Fatalf("%q matches %q but its literal head is %q", pattern, topic, p.Literal())
		}
		if protocol.ValidateTopic(pattern) == nil && !p.Match(pattern) {
			t.Fatalf("%q does not match itself", pattern)
		}
	})
}

// TestWildcards: each '?' and each class counts, a run of '*' counts
// once, and the characters inside a class are not counted again.
func TestWildcards(t *testing.T) {
	for pattern, want := range map[string]int{
		"agent:a":      0,
		"agent:*":      1,
		"**":           1,
		"a*b*c":        2,
		"a?b":          1,
		"a[*?]b":       1,
		"*[ab]?**x[c]": 5,
	} {
		if got := protocol.Wildcards(pattern); got != want {
			t.Errorf("Wildcards(%q) = %d, want %d", pattern, got, want)
		}
	}
}
