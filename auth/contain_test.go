package auth

import (
	"testing"

	"github.com/bub-bus/bub/protocol"
)

func mustPattern(t testing.TB, s string) *protocol.Pattern {
	t.Helper()
	p, err := protocol.ParsePattern(s)
	if err != nil {
		t.Fatalf("pattern %q: %v", s, err)
	}
	return p
}

// TestCovers: each row is a grant pattern g, a subscription p, and
// whether g provably covers p. Rows marked "unsure" are true in fact
// but refused because the rule cannot prove them simply; that is the
// documented, safe side.
func TestCovers(t *testing.T) {
	tests := []struct {
		g, p string
		want bool
		why  string
	}{
		{"agent:a", "agent:a", true, "exact equals exact"},
		{"agent:a", "agent:b", false, "exact differs"},
		{"agent:a", "agent:*", false, "exact never covers a glob"},
		{"agent:a", "agent:[a]", false, "unsure: a one-topic class"},
		{"agent:", "agent:", true, "prefix covers itself"},
		{"agent:", "agent:x", true, "prefix covers an exact under it"},
		{"agent:", "agent:x:", true, "prefix covers a longer prefix"},
		{"agent:", "agent:*", true, "prefix covers a glob whose literal starts with it"},
		{"agent:", "agent:[ab]x", true, "class after the literal"},
		{"agent:", "agent?", false, "? could be any character, not only ':'"},
		{"agent:", "agen*", false, "glob reaches outside the prefix"},
		{"agent:", "*", false, "star covers everything"},
		{"agent-", "agent-1", true, "dash prefix"},
		{"agent:*", "agent:x", true, "glob matches the exact"},
		{"agent:*", "agent:", true, "L* covers the prefix L"},
		{"agent:*", "agent:x-", true, "L* covers a longer prefix"},
		{"agent:*", "agent:x*", true, "L* covers a narrower glob"},
		{"agent:*", "agent:?", true, "L* covers ?"},
		{"agent:*", "agent:[!a]*", true, "L* covers a negated class"},
		{"agent:*", "agent*", false, "wider literal"},
		{"agent:*", "agents:*", false, "different namespace"},
		{"agent:*", "*", false, "star is wider"},
		{"*", "*", true, "identical"},
		{"*", "anything:[ab]?", true, "* covers every glob"},
		{"*", "x", true, "* matches an exact"},
		{"agent:?", "agent:a", true, "? matches one character"},
		{"agent:?", "agent:ab", false, "? is one character"},
		{"agent:?", "agent:[ab]", false, "unsure: a class inside ?"},
		{"agent:?", "agent:?", true, "identical glob"},
		{"agent:[ab]", "agent:a", true, "class matches"},
		{"agent:[ab]", "agent:c", false, "class does not match"},
		{"agent:[ab]", "agent:[a]", false, "unsure: narrower class"},
		{"agent:[!a]", "agent:b", true, "negated class matches"},
		{"agent:[!a]", "agent:a", false, "negated class refuses"},
		{"agent:*:x", "agent:b:x", true, "inner star, exact"},
		{"agent:*:x", "agent:*:x", true, "identical inner star"},
		{"agent:*:x", "agent:b*:x", false, "unsure: narrower inner star"},
		{"agent:*:x", "agent:", false, "inner star does not cover a prefix"},
		{"a*b*", "a*", false, "a*b* is not L*"},
	}
	for _, tt := range tests {
		if got := covers(mustPattern(t, tt.g), mustPattern(t, tt.p)); got != tt.want {
			t.Errorf("covers(%q, %q) = %v, want %v (%s)", tt.g, tt.p, got, tt.want, tt.why)
		}
	}
}

// TestOverlaps: d is a deny pattern, p a subscription; true when some
// topic could match both (or the rule cannot rule it out).
func TestOverlaps(t *testing.T) {
	tests := []struct {
		d, p string
		want bool
	}{
		{"agent:a", "agent:a", true},
		{"agent:a", "agent:b", false},
		{"agent:a", "agent:*", true},
		{"agent:a", "agent:[bc]", false},
		{"agent:*", "agent:a", true},
		{"agent:", "agent:a", true},
		{"agent:", "other:", false},
		{"agent:", "age*", true},
		{"agent:x*", "agent:y*", false},
		{"agent:x*", "agent:*", true},
		{"*", "anything:", true},
		{"agent:*a", "agent:*b", true}, // in fact disjoint; unsure, so true
		{"system:", "s*", true},
	}
	for _, tt := range tests {
		if got := overlaps(mustPattern(t, tt.d), mustPattern(t, tt.p)); got != tt.want {
			t.Errorf("overlaps(%q, %q) = %v, want %v", tt.d, tt.p, got, tt.want)
		}
	}
}

func TestMayMatchSystem(t *testing.T) {
	for p, want := range map[string]bool{
		"system:*":       true,
		"system:agent.x": true,
		"system:":        true,
		"*":              true,
		"s*":             true,
		"sys?em:x":       true,
		"syst":           false, // an exact topic is judged as itself
		"s[!y]stem:*":    true,  // in fact cannot; unsure, so true
		"agent:*":        false,
		"systems:*":      false,
		"x*":             false,
	} {
		if got := mayMatchSystem(mustPattern(t, p)); got != want {
			t.Errorf("mayMatchSystem(%q) = %v, want %v", p, got, want)
		}
	}
}
