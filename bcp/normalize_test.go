package bcp

import (
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestNormalizeText(t *testing.T) {
	tests := []struct {
		in, lower, keepCase string
	}{
		{"  Hello   World  ", "hello world", "Hello World"},
		{"a\tb\nc\r\nd", "a b c d", "a b c d"},
		{"a\u00a0b\u2003c\u3000d\u2028e\u0085f", "a b c d e f", "a b c d e f"},
		{"zero\u200bwidth", "zerowidth", "zerowidth"},
		{"bi\u202edi\u202c", "bidi", "bidi"},
		{"soft\u00adhyphen", "softhyphen", "softhyphen"},
		{"e\u0301", "é", "é"},
		{"e\u200b\u0301", "é", "é"},
		{"\u0130stanbul", "istanbul", "\u0130stanbul"},
		{"ÅNGSTRÖM", "ångström", "ÅNGSTRÖM"},
		{"\ufeffbom", "bom", "bom"},
		{"ctrl\x00\x1f\x7fchars", "ctrlchars", "ctrlchars"},
		{"private\ue000use", "privateuse", "privateuse"},
		{"", "", ""},
		{" \u200b ", "", ""},
	}
	for _, tt := range tests {
		if got := normalizeText(tt.in, true); got != tt.lower {
			t.Errorf("normalizeText(%q, lower) = %q, want %q", tt.in, got, tt.lower)
		}
		if got := normalizeText(tt.in, false); got != tt.keepCase {
			t.Errorf("normalizeText(%q, keep case) = %q, want %q", tt.in, got, tt.keepCase)
		}
	}
}

func TestCountWords(t *testing.T) {
	for in, want := range map[string]int{"": 0, "a": 1, "a b": 2, "a, b, c": 3} {
		if got := countWords(in); got != want {
			t.Errorf("countWords(%q) = %d, want %d", in, got, want)
		}
	}
}

func FuzzNormalizeText(f *testing.F) {
	for _, s := range []string{"Hello  World", "e\u200b\u0301", "\u0130", "ǅ", "ﬀ", "\u1e9e", "a\u0345\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, lower := range []bool{true, false} {
			out := normalizeText(s, lower)
			if again := normalizeText(out, lower); again != out {
				t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
			}
			if utf8.ValidString(s) && !norm.NFKC.IsNormalString(out) {
				t.Fatalf("%q normalizes to %q, which is not NFKC", s, out)
			}
		}
	})
}
