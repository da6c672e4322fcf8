package telegram

import (
	"strings"
	"unicode/utf16"
)

// maxMessageLength is Telegram's limit on a message's text. Telegram
// counts UTF-16 code units, so an emoji counts two.
const maxMessageLength = 4096

// utf16Len is the length of s as Telegram counts it.
func utf16Len(s string) int {
	// Ranging over a string yields U+FFFD for invalid bytes, which is
	// one unit, so RuneLen is never negative here.
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// split cuts text into pieces of at most limit UTF-16 units, each cut at
// the last paragraph break that fits, else the last line break, else the
// last space, else (one unbroken word) at the limit itself. The separator
// at a cut is dropped, so the pieces read as the text did.
func split(text string, limit int) []string {
	var parts []string
	for utf16Len(text) > limit {
		head := prefixOfLength(text, limit)
		cut, skip := -1, 0
		for _, sep := range []string{"\n\n", "\n", " "} {
			// A separator right after the longest piece that fits is
			// the best cut of all.
			if strings.HasPrefix(text[len(head):], sep) {
				cut, skip = len(head), len(sep)
				break
			}
			// A cut at 0 would make an empty piece.
			if i := strings.LastIndex(head, sep); i > 0 {
				cut, skip = i, len(sep)
				break
			}
		}
		if cut < 0 {
			cut = len(head)
		}
		parts = append(parts, text[:cut])
		text = text[cut+skip:]
	}
	if text != "" || len(parts) == 0 {
		parts = append(parts, text)
	}
	return parts
}

// prefixOfLength returns the longest prefix of s of at most limit UTF-16
// units that ends on a rune boundary.
func prefixOfLength(s string, limit int) string {
	n := 0
	for i, r := range s {
		w := utf16.RuneLen(r)
		if n+w > limit {
			return s[:i]
		}
		n += w
	}
	return s
}
