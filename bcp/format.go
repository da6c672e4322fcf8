package bcp

import (
	"strings"
	"time"
	"unicode"
)

// canonicalAnswer checks a normalized, lowercased answer against its
// format and returns its canonical form, or a reason it does not match.
// Every canonical form is a fixed point: canonicalAnswer(f, out) == out.
func canonicalAnswer(f Format, s string) (string, string) {
	switch f {
	case ShortText:
		return s, ""
	case PersonName:
		return canonicalName(s)
	case Date:
		return canonicalDate(s)
	case Email:
		return canonicalEmail(s)
	case IntegerFormat:
		return canonicalInteger(s)
	case ShortList:
		return canonicalList(s)
	}
	return "", "unknown format"
}

// canonicalName allows letters (with their combining marks), spaces,
// hyphens, apostrophes and periods, and requires a letter. Typographic
// apostrophes become ASCII ones so the choice of apostrophe carries nothing.
func canonicalName(s string) (string, string) {
	s = strings.NewReplacer("\u2019", "'", "\u02bc", "'", "\u2018", "'").Replace(s)
	letter := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r):
			letter = true
		case unicode.IsMark(r), r == ' ', r == '-', r == '\'', r == '.':
		default:
			return "", "a person's name may contain only letters, spaces, hyphens, apostrophes and periods"
		}
	}
	if !letter {
		return "", "a person's name needs at least one letter"
	}
	return s, ""
}

// canonicalDate accepts only YYYY-MM-DD naming a real calendar day: digits
// have no case, so the date is its own canonical form.
func canonicalDate(s string) (string, string) {
	const want = "a date must be YYYY-MM-DD and a real calendar day"
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return "", want
	}
	for i := 0; i < len(s); i++ {
		if i != 4 && i != 7 && (s[i] < '0' || s[i] > '9') {
			return "", want
		}
	}
	if _, err := time.Parse(time.DateOnly, s); err != nil {
		return "", want
	}
	return s, ""
}

// canonicalEmail accepts a plain ASCII address: a dot-atom local part, "@",
// and a domain of at least two labels ending in a letter-only top level.
// Quoted local parts, comments and IP literals are refused: each is a place
// to hide text.
func canonicalEmail(s string) (string, string) {
	const want = "an email address must look like name@example.com"
	at := strings.IndexByte(s, '@')
	if at <= 0 || at != strings.LastIndexByte(s, '@') || len(s) > 254 {
		return "", want
	}
	local, domain := s[:at], s[at+1:]
	if len(local) > 64 || local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return "", want
	}
	for i := 0; i < len(local); i++ {
		c := local[i]
		if !isAlnum(c) && !strings.ContainsRune(".!#$%&'*+/=?^_`{|}~-", rune(c)) {
			return "", want
		}
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "", want
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", want
		}
		for i := 0; i < len(l); i++ {
			if !isAlnum(l[i]) && l[i] != '-' {
				return "", want
			}
		}
	}
	tld := labels[len(labels)-1]
	if len(tld) < 2 {
		return "", want
	}
	for i := 0; i < len(tld); i++ {
		if tld[i] < 'a' || tld[i] > 'z' {
			return "", want
		}
	}
	return s, ""
}

// canonicalInteger accepts an optional sign and ASCII digits and writes the
// number in canonical decimal: no "+", no leading zeros, no "-0".
func canonicalInteger(s string) (string, string) {
	const want = "an integer must be an optional sign followed by digits"
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	if s == "" {
		return "", want
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return "", want
		}
	}
	s = strings.TrimLeft(s, "0")
	if s == "" {
		return "0", ""
	}
	if neg {
		return "-" + s, ""
	}
	return s, ""
}

// canonicalList splits on commas, requires every item to be non-empty, and
// joins the trimmed items with ", ".
func canonicalList(s string) (string, string) {
	items := strings.Split(s, ",")
	for i, item := range items {
		items[i] = strings.TrimSpace(item)
		if items[i] == "" {
			return "", "a list must be comma-separated non-empty items"
		}
	}
	return strings.Join(items, ", "), ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}
