package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bub-bus/bub/protocol"
)

// A template makes a topic (or a delivery id) from a webhook request:
// literal text, and placeholders in braces that the request fills.
//
//	{repository.full_name}   a JSON field of the body, by a dotted path;
//	                         a number segment indexes an array
//	{header:X-GitHub-Event}  a request header
//	{action|none}            with a default, used when the value is missing
//
// A value is missing when the field or header is absent, null, an empty
// string, an object or an array; a missing value without a default
// refuses the request (400, naming the placeholder), so that a message
// never lands on a topic nobody meant. Numbers and booleans are written
// as JSON writes them. In a value, every character a topic may not hold
// (whitespace, control characters, * ? [ ] { } \) becomes '_'; a value
// cannot add pattern characters, and two values that differ only there
// land on the same topic.
type template struct {
	parts []templatePart
}

// templatePart is literal text, or one placeholder.
type templatePart struct {
	literal string
	// header names a header placeholder; path, a field placeholder.
	header string
	path   []string
	// def is the default, "" for none.
	def string
}

// maxTemplateParts bounds a template, so that rendering one stays cheap.
const maxTemplateParts = 32

// parseTemplate reads a template.
func parseTemplate(s string) (*template, error) {
	if s == "" {
		return nil, errors.New("empty template")
	}
	t := &template{}
	for rest := s; rest != ""; {
		if len(t.parts) == maxTemplateParts {
			return nil, fmt.Errorf("more than %d parts", maxTemplateParts)
		}
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			open = len(rest)
		}
		if open > 0 {
			lit := rest[:open]
			if err := checkTopicText(lit); err != nil {
				return nil, fmt.Errorf("literal %q: %w", lit, err)
			}
			t.parts = append(t.parts, templatePart{literal: lit})
			rest = rest[open:]
			continue
		}
		if rest[0] == '}' {
			return nil, fmt.Errorf("'}' at byte %d closes nothing", len(s)-len(rest))
		}
		end := strings.IndexAny(rest[1:], "{}")
		if end < 0 || rest[1+end] != '}' {
			return nil, fmt.Errorf("'{' at byte %d is not closed", len(s)-len(rest))
		}
		p, err := parsePlaceholder(rest[1 : 1+end])
		if err != nil {
			return nil, fmt.Errorf("placeholder {%s}: %w", rest[1:1+end], err)
		}
		t.parts = append(t.parts, p)
		rest = rest[end+2:]
	}
	return t, nil
}

// parsePlaceholder reads what is between a placeholder's braces.
func parsePlaceholder(s string) (templatePart, error) {
	var p templatePart
	s, p.def, _ = strings.Cut(s, "|")
	if p.def != "" {
		if err := checkTopicText(p.def); err != nil {
			return p, fmt.Errorf("default %q: %w", p.def, err)
		}
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ':' }) {
			return p, fmt.Errorf("header name %q: want a header name such as X-GitHub-Event", name)
		}
		p.header = name
		return p, nil
	}
	if s == "" {
		return p, errors.New("empty: want a field path such as repository.full_name, or header:Name")
	}
	p.path = strings.Split(s, ".")
	for _, seg := range p.path {
		if seg == "" {
			return p, fmt.Errorf("field path %q has an empty segment", s)
		}
	}
	return p, nil
}

// checkTopicText checks text that goes into a topic as it is.
func checkTopicText(s string) error {
	if i := strings.IndexFunc(s, notTopicRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("%q at byte %d may not be in a topic", r, i)
	}
	return nil
}

// notTopicRune reports the characters a topic may not hold.
func notTopicRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError || strings.ContainsRune("*?[]{}\\", r)
}

// head is the template's leading literal text, "" when it starts with a
// placeholder.
func (t *template) head() string {
	if len(t.parts) == 0 || t.parts[0].literal == "" {
		return ""
	}
	return t.parts[0].literal
}

// render fills the template from the request's headers and its body,
// decoded with UseNumber.
func (t *template) render(header http.Header, doc any) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.literal != "" {
			b.WriteString(p.literal)
			if b.Len() > protocol.MaxTopicBytes {
				return "", fmt.Errorf("more than %d bytes", protocol.MaxTopicBytes)
			}
			continue
		}
		var v string
		if p.header != "" {
			v = header.Get(p.header)
		} else {
			v = field(doc, p.path)
		}
		if v == "" {
			v = p.def
		}
		if v == "" {
			return "", fmt.Errorf("%s is missing and the placeholder has no default ({...|default})", p.describe())
		}
		b.WriteString(strings.Map(func(r rune) rune {
			if notTopicRune(r) {
				return '_'
			}
			return r
		}, strings.ToValidUTF8(v, "_")))
		if b.Len() > protocol.MaxTopicBytes {
			return "", fmt.Errorf("more than %d bytes", protocol.MaxTopicBytes)
		}
	}
	return b.String(), nil
}

// describe names a placeholder in an error.
func (p templatePart) describe() string {
	if p.header != "" {
		return "header " + p.header
	}
	return "field " + strings.Join(p.path, ".")
}

// field returns the scalar at path in doc as text, "" when there is
// none.
func field(doc any, path []string) string {
	for _, seg := range path {
		switch v := doc.(type) {
		case map[string]any:
			doc = v[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v) {
				return ""
			}
			doc = v[i]
		default:
			return ""
		}
	}
	switch v := doc.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}
