package telegram

import (
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		text  string
		limit int
		want  []string
	}{
		{"short", 10, []string{"short"}},
		{"", 10, []string{""}},
		{"para one\n\npara two", 12, []string{"para one", "para two"}},
		{"line one\nline two", 12, []string{"line one", "line two"}},
		{"some words here", 9, []string{"some", "words", "here"}},
		{"12345\n\n67", 5, []string{"12345", "67"}},
		{"12345 67 8", 5, []string{"12345", "67 8"}},
		{"unbrokenword", 5, []string{"unbro", "kenwo", "rd"}},
		{"😀😀😀", 4, []string{"😀😀", "😀"}}, // two UTF-16 units each
	} {
		if got := split(tc.text, tc.limit); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("split(%q, %d) = %q, want %q", tc.text, tc.limit, got, tc.want)
		}
	}
}

// split cuts text into pieces of at most limit UTF-16 units, each cut at
// the last paragraph break that fits, else the last line break, else the
// last space, else (one unbroken word) at the limit itself. The separator
// at a cut is dropped, so the pieces read as the text did.
func split(text string, limit int) []string { return splitWhere(text, limit, nil) }
