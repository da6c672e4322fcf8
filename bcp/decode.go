package bcp

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// decoder walks a node tree against a schema and collects every structural
// problem (wrong types, unknown and missing keys) with its path and line.
// Semantic rules are checked afterwards on the typed values, so a hand-built
// Spec is held to the same rules as a decoded one.
type decoder struct {
	errs []*Error
}

func (d *decoder) fail(n *node, code Code, path, format string, args ...any) {
	e := newError(code, path, fmt.Sprintf(format, args...))
	if n != nil {
		e.Line = n.line
	}
	d.errs = append(d.errs, e)
}

// object reports whether n is an object, and reports every key not in known.
func (d *decoder) object(n *node, path string, known ...string) bool {
	if n.kind != kindObject {
		d.fail(n, CodeWrongType, path, "must be an object, not %s", n.kind)
		return false
	}
	for i, k := range n.keys {
		if !slices.Contains(known, k) {
			d.fail(n.vals[i], CodeUnknownKey, joinPath(path, k), "unknown key %q", k)
		}
	}
	return true
}

// require returns obj's value for key, reporting missing_key when absent.
func (d *decoder) require(obj *node, path, key string) *node {
	v := obj.get(key)
	if v == nil {
		d.fail(obj, CodeMissingKey, joinPath(path, key), "required key %q is missing", key)
	}
	return v
}

func (d *decoder) str(n *node, path string) string {
	if n.kind != kindString {
		d.fail(n, CodeWrongType, path, "must be a string, not %s", n.kind)
		return ""
	}
	return n.text
}

func (d *decoder) boolean(n *node, path string) bool {
	if n.kind != kindBool {
		d.fail(n, CodeWrongType, path, "must be true or false, not %s", n.kind)
		return false
	}
	return n.bool
}

// integer accepts only an integer literal: 3.0, 1e2 and "3" are wrong types,
// because a schema that says integer means the author wrote one.
func (d *decoder) integer(n *node, path string) (int64, bool) {
	if n.kind != kindNumber || !isIntegerLiteral(n.text) {
		d.fail(n, CodeWrongType, path, "must be an integer, not %s", describe(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.text, 10, 64)
	if err != nil {
		d.fail(n, CodeBadRange, path, "integer %s does not fit in 64 bits", n.text)
		return 0, false
	}
	return v, true
}

// count decodes a non-negative size such as max_words, saturating so an
// absurd value still reaches the range check instead of wrapping.
func (d *decoder) count(n *node, path string) int {
	v, ok := d.integer(n, path)
	if !ok {
		return 0
	}
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	if v < math.MinInt32 {
		return math.MinInt32
	}
	return int(v)
}

// size decodes max_words or max_chars. Zero is refused here because in the
// typed Spec it means "not declared".
func (d *decoder) size(n *node, path string, limit int) int {
	v := d.count(n, path)
	if v <= 0 && n.kind == kindNumber && isIntegerLiteral(n.text) {
		d.fail(n, CodeBadMaxWords, path, "must be between 1 and %d, not %s", limit, truncate(n.text, 24))
	}
	return v
}

func (d *decoder) list(n *node, path string) []*node {
	if n.kind != kindArray {
		d.fail(n, CodeWrongType, path, "must be a list, not %s", n.kind)
		return nil
	}
	return n.items
}

// isIntegerLiteral reports whether s is -?(0|[1-9][0-9]*), JSON's integer
// grammar, which is also the canonical decimal form apart from "-0".
func isIntegerLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// describe names a value for an error message without echoing much of it:
// error details may reach a Controller and must not become a channel.
func describe(n *node) string {
	if n.kind == kindNumber {
		return "the number " + truncate(n.text, 24)
	}
	return n.kind.String()
}

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// lineAt returns the line of the value at path in the tree, or the line of
// the deepest ancestor that exists, so semantic errors found on typed values
// still point into the file.
func (n *node) lineAt(path string) int {
	cur, line := n, n.line
	for path != "" && cur != nil {
		var seg string
		seg, path = nextSegment(path)
		if strings.HasPrefix(seg, "[") {
			i, err := strconv.Atoi(strings.Trim(seg, "[]"))
			if err != nil || cur.kind != kindArray || i < 0 || i >= len(cur.items) {
				return line
			}
			cur = cur.items[i]
		} else if cur.kind == kindObject {
			cur = cur.get(seg)
		} else {
			return line
		}
		if cur != nil && cur.line > 0 {
			line = cur.line
		}
	}
	return line
}

// nextSegment splits "a.b[2].c" into "a" and "b[2].c", and "[2].c" into
// "[2]" and "c".
func nextSegment(path string) (string, string) {
	if strings.HasPrefix(path, "[") {
		end := strings.IndexByte(path, ']')
		if end < 0 {
			return path, ""
		}
		return path[:end+1], strings.TrimPrefix(path[end+1:], ".")
	}
	end := strings.IndexAny(path, ".[")
	if end < 0 {
		return path, ""
	}
	return path[:end], strings.TrimPrefix(path[end:], ".")
}
