package telegram

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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

// splitMarkup is split for text in parseMode: a cut is made only where
// the markup is at its top level (safeCuts), so that no piece ends in a
// '\' escape, inside an HTML tag or &entity;, or with an entity (bold,
// code, a link, an open tag) that the next piece closes. Where no such
// cut fits in limit (one entity longer than a message), the piece is cut
// as plain text would be, Telegram refuses its markup, and that piece
// alone is sent again as plain text (Bridge.sendPiece).
func splitMarkup(text, parseMode string, limit int) []string {
	if utf16Len(text) <= limit {
		return []string{text}
	}
	return splitWhere(text, limit, safeCuts(text, parseMode))
}

// splitWhere is split with cuts only at byte offsets i where safe[i]
// (every offset when safe is nil), unless none fits.
func splitWhere(text string, limit int, safe []bool) []string {
	var parts []string
	base := 0 // offset of text in the original, for safe
	ok := func(i int) bool { return safe == nil || safe[base+i] }
	for utf16Len(text) > limit {
		head := prefixOfLength(text, limit)
		cut, skip := findCut(text, head, ok)
		if cut < 0 {
			// No safe cut fits: cut as plain text would be.
			cut, skip = findCut(text, head, func(int) bool { return true })
		}
		if cut <= 0 {
			cut, skip = len(head), 0
		}
		parts = append(parts, text[:cut])
		base += cut + skip
		text = text[cut+skip:]
	}
	if text != "" || len(parts) == 0 {
		parts = append(parts, text)
	}
	return parts
}

// findCut is where to cut text, whose longest prefix that fits is head:
// at the last paragraph break, line break or space of head (or right
// after it) where ok, else at the last rune boundary where ok; -1 if none.
// skip is the separator's length, dropped at the cut.
func findCut(text, head string, ok func(int) bool) (cut, skip int) {
	for _, sep := range []string{"\n\n", "\n", " "} {
		// A separator right after the longest piece that fits is the
		// best cut of all.
		if strings.HasPrefix(text[len(head):], sep) && ok(len(head)) {
			return len(head), len(sep)
		}
		// A cut at 0 would make an empty piece.
		for i := strings.LastIndex(head, sep); i > 0; i = strings.LastIndex(head[:i], sep) {
			if ok(i) {
				return i, len(sep)
			}
		}
	}
	for i := len(head); i > 0; i-- {
		if utf8.RuneStart(text[i]) && ok(i) {
			return i, 0
		}
	}
	return -1, 0
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
