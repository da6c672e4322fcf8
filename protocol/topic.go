package protocol

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gobwas/glob"
)

// MaxTopicBytes bounds topics and patterns.
const MaxTopicBytes = 1024

// patternChars have a meaning in patterns; a topic never contains them.
const patternChars = "*?[]"

// reservedChars are refused in topics and patterns alike, so that a
// pattern is never read differently by a glob engine than by a person.
const reservedChars = "{}\\"

// ValidateTopic checks a topic that a message is published to: non-empty,
// at most MaxTopicBytes, valid UTF-8, no whitespace or control characters,
// and none of the pattern characters * ? [ ] nor the reserved { } \.
func ValidateTopic(topic string) error {
	if err := checkName("topic", topic); err != nil {
		return err
	}
	if i := strings.IndexAny(topic, patternChars); i >= 0 {
		return fmt.Errorf("topic %q has the pattern character %q at byte %d; publish to a concrete topic", topic, topic[i], i)
	}
	return nil
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is required", what)
	case len(s) > MaxTopicBytes:
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), MaxTopicBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("%s %q has whitespace or a control character at byte %d", what, s, i)
	}
	if i := strings.IndexAny(s, reservedChars); i >= 0 {
		return fmt.Errorf("%s %q has the reserved character %q at byte %d", what, s, s[i], i)
	}
	return nil
}

// PatternKind says how a pattern matches.
type PatternKind int

// The kinds of pattern.
const (
	// Exact patterns have no pattern characters and match only the
	// identical topic.
	Exact PatternKind = iota
	// Prefix patterns have no pattern characters and end in ':' or '-';
	// they match every topic that starts with them, themselves included.
	Prefix
	// Glob patterns have pattern characters and match fnmatch-style: '*'
	// any run of characters (':' included), '?' one character, '[...]' a
	// class ('[!...]' negated, ranges allowed).
	Glob
)

// Pattern is a compiled subscription pattern.
type Pattern struct {
	raw  string
	kind PatternKind
	glob *glob.Pattern
}

// ParsePattern compiles a subscription pattern.
func ParsePattern(s string) (*Pattern, error) {
	if err := checkName("topic pattern", s); err != nil {
		return nil, err
	}
	p := &Pattern{raw: s}
	switch {
	case strings.ContainsAny(s, patternChars):
		g, err := glob.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("topic pattern %q: %v", s, err)
		}
		p.kind, p.glob = Glob, g
	case strings.HasSuffix(s, ":") || strings.HasSuffix(s, "-"):
		p.kind = Prefix
	default:
		p.kind = Exact
	}
	return p, nil
}

// String returns the pattern as written.
func (p *Pattern) String() string { return p.raw }

// Kind says how the pattern matches.
func (p *Pattern) Kind() PatternKind { return p.kind }

// Literal returns the part of the pattern before its first pattern
// character: for Exact and Prefix patterns the whole pattern. Every topic
// the pattern matches starts with it.
func (p *Pattern) Literal() string {
	if i := strings.IndexAny(p.raw, patternChars); i >= 0 {
		return p.raw[:i]
	}
	return p.raw
}

// Match reports whether the pattern matches topic.
func (p *Pattern) Match(topic string) bool {
	switch p.kind {
	case Exact:
		return topic == p.raw
	case Prefix:
		return strings.HasPrefix(topic, p.raw)
	}
	return p.glob.Match(topic)
}

// Wildcards counts what makes a pattern costly to match, for a bound on
// it: each '?', each class ('[' to ']'), and each run of '*' once, since
// '**' matches as '*' does.
func Wildcards(pattern string) int {
	n := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '*':
			if i == 0 || pattern[i-1] != '*' {
				n++
			}
		case '?':
			n++
		case '[':
			n++
			for i < len(pattern) && pattern[i] != ']' {
				i++
			}
		}
	}
	return n
}
