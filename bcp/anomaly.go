package bcp

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// AnomalyKind names what made an answer suspicious.
type AnomalyKind string

// The anomaly kinds; docs/BCP.md lists what each one matches.
const (
	AnomalyInstruction AnomalyKind = "instruction" // instruction-like language
	AnomalyURL         AnomalyKind = "url"         // a URL, bare domain or IP address
	AnomalyCode        AnomalyKind = "code"        // backticks, code punctuation, shell prompts
	AnomalyInvisible   AnomalyKind = "invisible"   // invisible or control characters in the raw answer
)

// Anomaly is one suspicious trait of one text answer, as the Controller
// may see it. Excerpt is cut from the normalized answer the Controller
// receives anyway, so it adds no channel; an invisible anomaly has none,
// since what was removed is exactly what the Controller must not see
// (its code points are in [Result.Evidence]).
type Anomaly struct {
	Question string      `json:"question"`
	Kind     AnomalyKind `json:"kind"`
	Excerpt  string      `json:"excerpt,omitempty"`
}

// Evidence is what an anomaly was found on in the raw answer, which only
// the Reader and the audit log may see: the code points of the invisible
// characters normalization removed, in the order the Reader wrote them.
// Passed to a Controller, it would be a channel the budget does not
// charge.
type Evidence struct {
	Question string      `json:"question"`
	Kind     AnomalyKind `json:"kind"`
	Detail   string      `json:"detail"`
}

// AnomalyPolicy says what happens to a response with anomalies.
type AnomalyPolicy string

// The anomaly policies. The zero value flags.
const (
	// FlagAnomalies delivers the response with its list of anomalies.
	FlagAnomalies AnomalyPolicy = "flag"
	// RejectAnomalies rejects the response with code anomaly.
	RejectAnomalies AnomalyPolicy = "reject"
)

// The patterns run on the lowercased normalized (NFKC) answer, so fullwidth
// letters and compatibility forms of a keyword are caught too. Go's regexp
// runs in linear time, so hostile answers cannot make them slow.
var (
	instructionPattern = regexp.MustCompile(`\b(?:please|ignor(?:e|ed|es|ing)|instead|forget|disregard|overrid(?:e|es|ing))\b` +
		`|\byou (?:should|must|need to|have to|are now|will now)\b` +
		`|\b(?:system|assistant|developer)\s*:` +
		`|\b(?:previous|prior|above|new) instructions?\b|\bact as\b|\bdo not (?:tell|mention|reveal)\b`)
	urlPattern = regexp.MustCompile(`[a-z][a-z0-9+.-]*://\S*|\bwww\.\S+|\bmailto:\S+` +
		`|\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}\b` +
		`|\b\d{1,3}(?:\.\d{1,3}){3}\b`)
	codePattern = regexp.MustCompile("`" +
		`|\{[^}]*;|;[^{]*\}|\$\(|\$\{|&&|\|\s*(?:sh|bash|zsh)\b` +
		`|(?:^|\s)(?:\$|>>>)\s+[a-z./~]|\b[a-z]:\\>|\b(?:sudo|wget|curl|chmod)\s|\brm\s+-|<\s*/?\s*script|\beval\s*\(`)
)

// detectAnomalies lists the anomalies of one answer, and the evidence of
// those found in the raw text: raw is the answer as received, text its
// normalized form. skipURL is set for email answers, whose format is a
// domain by definition. Every anomaly but invisible is a function of text,
// which the Controller receives anyway; invisible is one bit per answer.
func detectAnomalies(question, raw, text string, skipURL bool) ([]Anomaly, []Evidence) {
	var out []Anomaly
	var evidence []Evidence
	if points := invisiblePoints(raw); points != "" {
		out = append(out, Anomaly{Question: question, Kind: AnomalyInvisible})
		evidence = append(evidence, Evidence{Question: question, Kind: AnomalyInvisible, Detail: points})
	}
	// text is NFKC already (normalizeText): fullwidth and mathematical
	// letters are plain ones.
	folded := strings.ToLower(text)
	patterns := []struct {
		kind AnomalyKind
		re   *regexp.Regexp
	}{{AnomalyInstruction, instructionPattern}, {AnomalyURL, urlPattern}, {AnomalyCode, codePattern}}
	for _, p := range patterns {
		if p.kind == AnomalyURL && skipURL {
			continue
		}
		if loc := p.re.FindStringIndex(folded); loc != nil {
			out = append(out, Anomaly{Question: question, Kind: p.kind, Excerpt: excerpt(folded, loc[0], loc[1])})
		}
	}
	return out, evidence
}

// excerpt returns the match (cut at 40 bytes) with up to two words of
// context on each side.
func excerpt(s string, start, end int) string {
	const words, maxMatch = 2, 40
	match := truncate(s[start:end], maxMatch)
	before := strings.Fields(s[:start])
	after := strings.Fields(s[end:])
	var b strings.Builder
	if len(before) > words {
		b.WriteString("…")
		before = before[len(before)-words:]
	}
	for _, w := range before {
		b.WriteString(truncate(w, 16))
		b.WriteByte(' ')
	}
	if start > 0 && !strings.HasSuffix(s[:start], " ") && len(before) > 0 {
		// the match starts inside a word: undo the separating space
		out := strings.TrimSuffix(b.String(), " ")
		b.Reset()
		b.WriteString(out)
	}
	b.WriteString(match)
	for i, w := range after {
		if i == words {
			b.WriteString(" …")
			break
		}
		if i > 0 || strings.HasPrefix(s[end:], " ") {
			b.WriteByte(' ')
		}
		b.WriteString(truncate(w, 16))
	}
	return b.String()
}

// invisiblePoints names the distinct invisible code points in s, at most
// four, as "U+200B U+202E"; "" if there are none.
func invisiblePoints(s string) string {
	var names []string
	seen := map[rune]bool{}
	for _, r := range s {
		if unicode.IsSpace(r) || !isInvisible(r) || seen[r] {
			continue
		}
		seen[r] = true
		if len(names) == 4 {
			names = append(names, "…")
			break
		}
		names = append(names, fmt.Sprintf("U+%04X", r))
	}
	return strings.Join(names, " ")
}

// scripts are the writing systems told apart inside a word. Han, Hiragana,
// Katakana and Hangul are one group because Japanese and Korean words mix
// them legitimately. Letters of other scripts count as one "other" script.
var scripts = []struct {
	name   string
	tables []*unicode.RangeTable
}{
	{"latin", []*unicode.RangeTable{unicode.Latin}},
	{"greek", []*unicode.RangeTable{unicode.Greek}},
	{"cyrillic", []*unicode.RangeTable{unicode.Cyrillic}},
	{"armenian", []*unicode.RangeTable{unicode.Armenian}},
	{"hebrew", []*unicode.RangeTable{unicode.Hebrew}},
	{"arabic", []*unicode.RangeTable{unicode.Arabic}},
	{"cherokee", []*unicode.RangeTable{unicode.Cherokee}},
	{"cjk", []*unicode.RangeTable{unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul}},
}

// mixedScriptWord returns the first word of s whose letters come from two
// scripts, the trick behind a Cyrillic "о" inside a Latin "ignоre": the
// same visible word in as many byte forms as it has look-alike letters.
func mixedScriptWord(s string) string {
	words := strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsMark(r)
	})
	for _, w := range words {
		first := ""
		for _, r := range w {
			if !unicode.IsLetter(r) || unicode.In(r, unicode.Common, unicode.Inherited) {
				continue // marks like the katakana "ー" belong to no one script
			}
			name := scriptOf(r)
			if first == "" {
				first = name
			} else if name != first {
				return w
			}
		}
	}
	return ""
}

func scriptOf(r rune) string {
	for _, s := range scripts {
		if unicode.In(r, s.tables...) {
			return s.name
		}
	}
	return "other"
}
