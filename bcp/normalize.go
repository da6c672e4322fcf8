package bcp

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizeText is the canonical form of a text answer: invisible and
// control characters removed (they carry bits a reader cannot see), Unicode
// NFKC (so one visible text has one encoding: a fullwidth, mathematical or
// ligature form of a letter or digit is that letter or digit, or a
// look-alike the Controller cannot tell apart would choose among a dozen
// byte forms per letter), lowercase when lower is set
// (capitalization is about a bit per word), every run of Unicode whitespace
// collapsed to one space, and trimmed. It is idempotent; the validator
// counts words and characters on its output, so a normalized answer always
// re-validates to itself.
//
// Invisible characters are removed before NFKC so that a combining mark
// split from its base by a zero-width character composes like visible text.
func normalizeText(s string, lower bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case isInvisible(r):
		default:
			b.WriteRune(r)
		}
	}
	out := norm.NFKC.String(b.String())
	if lower {
		// Lowercasing can decompose (U+0130 becomes i + U+0307), so compose
		// again to stay in NFKC.
		out = norm.NFKC.String(strings.ToLower(out))
	}
	return strings.Join(strings.Fields(out), " ")
}

// foldKey is the form in which enum values are compared: normalized and
// lowercased, so "High", " high " and "HIGH" are one value.
func foldKey(s string) string {
	return normalizeText(s, true)
}

// isInvisible reports whether r is a character that renders as nothing (or
// as nothing a reviewer would notice) and is not whitespace: controls, format
// characters such as zero-width spaces and bidirectional overrides, private
// use, noncharacters, unassigned code points, variation selectors (the
// Mongolian free ones too), Unicode's other default-ignorable code points
// (the combining grapheme joiner, the Khmer inherent vowels, the Hangul
// fillers, ...) and the Braille blank.
func isInvisible(r rune) bool {
	if r < 0x80 {
		return r < 0x20 || r == 0x7f // ASCII whitespace is handled before this
	}
	switch {
	case unicode.In(r, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point):
		return true
	case r == 0x2800:
		return true
	case r == utf8.RuneError:
		// Only reachable from invalid input the decoder already refused,
		// or a literal U+FFFD, which is a visible replacement glyph.
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Noncharacter_Code_Point) ||
		!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

// countWords counts the words of a normalized text, whose only whitespace is
// single spaces between words.
func countWords(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, " ") + 1
}
