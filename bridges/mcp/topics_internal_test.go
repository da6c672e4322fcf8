package mcp

import (
	"strings"
	"testing"
)

// TestPatternOf: a topic resource's URI names its pattern, percent-encoded
// or not; anything else is refused, saying what was wrong.
func TestPatternOf(t *testing.T) {
	tests := []struct {
		uri, want, wantErr string
	}{
		{"bub://topic/inbound:*", "inbound:*", ""},
		{"bub://topic/inbound:%2A", "inbound:*", ""},
		{"bub://topic/agent:main", "agent:main", ""},
		{"bub://topic/jobs:%5Bab%5Dx", "jobs:[ab]x", ""},
		{"bub://topic/", "", "names no pattern"},
		{"bub://topics/inbound:*", "", "want bub://topic/{pattern}"},
		{"file:///etc/passwd", "", "want bub://topic/{pattern}"},
		{"bub://topic/%zz", "", "not percent-encoded correctly"},
	}
	for _, tt := range tests {
		got, err := patternOf(tt.uri)
		switch {
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("patternOf(%q) = %q, %v; want %q", tt.uri, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.uri)):
			t.Errorf("patternOf(%q) = %q, %v; want an error naming the URI and saying %q", tt.uri, got, err, tt.wantErr)
		}
	}
}

// FuzzPatternOf: any URI a client sends is parsed or refused, never a
// panic, and a pattern without '%' comes back from its own URI.
func FuzzPatternOf(f *testing.F) {
	for _, s := range []string{"inbound:*", "agent:main", "jobs:[ab]x", "a%2Ab", "%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		got, err := patternOf(topicURI(pattern))
		if pattern != "" && !strings.Contains(pattern, "%") && (err != nil || got != pattern) {
			t.Errorf("patternOf(topicURI(%q)) = %q, %v", pattern, got, err)
		}
		_, _ = patternOf(pattern)
	})
}
