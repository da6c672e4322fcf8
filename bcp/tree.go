package bcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxDepth bounds nesting in decoded documents. No valid spec, response or
// definition nests deeper than 8; the bound keeps hostile input from costing
// stack or time.
const maxDepth = 32

// kind is the type of a decoded value.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

func (k kind) String() string {
	switch k {
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindObject:
		return "an object"
	case kindArray:
		return "a list"
	}
	return "null"
}

// node is a decoded JSON or YAML value. Both syntaxes decode to it so one
// strict schema walker serves specs from JSON queries and from YAML
// definitions, and sees what generic decoding hides: key order, duplicate
// keys, and the literal text of numbers.
type node struct {
	kind  kind
	bool  bool
	text  string // a string's value or a number's literal
	keys  []string
	vals  []*node // object values, parallel to keys
	items []*node
	line  int // 1-based line in the source, 0 when unknown (JSON)
}

// get returns an object's value for key, or nil.
func (n *node) get(key string) *node {
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// CheckJSON reports whether data is one JSON value the strict decoder
// accepts: valid UTF-8, no duplicate object keys at any depth, nesting of
// at most 32 levels, and nothing after the value. A gateway runs it on the
// envelopes it reads, so that the keys around a spec or a response are
// held to the rules of the spec and the response themselves: where two
// parsers may resolve a duplicate key differently, the gateway must not
// pick one. The error is a [*Error] with code syntax.
func CheckJSON(data []byte) error {
	if _, err := parseJSON(data); err != nil {
		return newError(CodeSyntax, "", err.Error())
	}
	return nil
}

// parseJSON decodes exactly one JSON value. Unlike encoding/json it rejects
// invalid UTF-8 (which json would silently turn into U+FFFD) and duplicate
// object keys (which different parsers resolve differently).
func parseJSON(data []byte) (*node, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return n, nil
}

func readJSON(dec *json.Decoder, depth int) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("unexpected end of JSON input")
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kindNull}, nil
	case bool:
		return &node{kind: kindBool, bool: t}, nil
	case json.Number:
		return &node{kind: kindNumber, text: string(t)}, nil
	case string:
		return &node{kind: kindString, text: t}, nil
	case json.Delim:
		if depth >= maxDepth {
			return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
		}
		if t == '[' {
			n := &node{kind: kindArray}
			for dec.More() {
				item, err := readJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, item)
			}
			_, err := dec.Token() // the closing ']'
			return n, err
		}
		n := &node{kind: kindObject}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := keyTok.(string)
			if n.get(key) != nil {
				return nil, fmt.Errorf("duplicate key %q", key)
			}
			val, err := readJSON(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, key)
			n.vals = append(n.vals, val)
		}
		_, err := dec.Token() // the closing '}'
		return n, err
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// parseYAML decodes one YAML document. lineOffset is added to every line so
// positions count from the start of the file, not of the front matter.
func parseYAML(data []byte, lineOffset int) (*node, *Error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlSyntaxError(err, lineOffset)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &node{kind: kindNull, line: lineOffset + 1}, nil
	}
	return fromYAML(doc.Content[0], "", lineOffset, 0)
}

// fromYAML converts a yaml.Node. Aliases are refused rather than expanded:
// a definition has no use for them and expanding them is how a small
// document becomes a huge one.
func fromYAML(y *yaml.Node, path string, lineOffset, depth int) (*node, *Error) {
	line := y.Line + lineOffset
	fail := func(format string, args ...any) (*node, *Error) {
		e := newError(CodeSyntax, path, fmt.Sprintf(format, args...))
		e.Line = line
		return nil, e
	}
	if depth >= maxDepth {
		return fail("nested deeper than %d levels", maxDepth)
	}
	switch y.Kind {
	case yaml.AliasNode:
		return fail("YAML aliases are not supported")
	case yaml.MappingNode:
		n := &node{kind: kindObject, line: line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k := y.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fail("mapping keys must be plain strings")
			}
			if n.get(k.Value) != nil {
				e := newError(CodeDuplicate, joinPath(path, k.Value), fmt.Sprintf("duplicate key %q", k.Value))
				e.Line = k.Line + lineOffset
				return nil, e
			}
			v, err := fromYAML(y.Content[i+1], joinPath(path, k.Value), lineOffset, depth+1)
			if err != nil {
				return nil, err
			}
			// A block value starts on the line after its key, but an error
			// about the value reads best pointing at the key.
			v.line = k.Line + lineOffset
			n.keys = append(n.keys, k.Value)
			n.vals = append(n.vals, v)
		}
		return n, nil
	case yaml.SequenceNode:
		n := &node{kind: kindArray, line: line}
		for i, c := range y.Content {
			v, err := fromYAML(c, indexPath(path, i), lineOffset, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		return n, nil
	case yaml.ScalarNode:
		switch y.ShortTag() {
		case "!!null":
			return &node{kind: kindNull, line: line}, nil
		case "!!bool":
			var b bool
			if err := y.Decode(&b); err != nil {
				return fail("bad boolean %q", y.Value)
			}
			return &node{kind: kindBool, bool: b, line: line}, nil
		case "!!int":
			var i int64
			if err := y.Decode(&i); err != nil {
				return fail("integer %q out of range", y.Value)
			}
			return &node{kind: kindNumber, text: strconv.FormatInt(i, 10), line: line}, nil
		case "!!float":
			return &node{kind: kindNumber, text: y.Value, line: line}, nil
		case "!!str", "!!timestamp":
			// A timestamp is a date-like plain scalar; our schema has no
			// time values, so it stays the text the author wrote.
			return &node{kind: kindString, text: y.Value, line: line}, nil
		}
		return fail("unsupported YAML tag %s", y.ShortTag())
	}
	return fail("unsupported YAML node")
}

// yamlSyntaxError turns the library's "yaml: line N: msg" into an Error
// whose line counts from the start of the file.
func yamlSyntaxError(err error, lineOffset int) *Error {
	msg := err.Error()
	e := newError(CodeSyntax, "", msg)
	const prefix = "yaml: line "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		rest := msg[len(prefix):]
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if n, convErr := strconv.Atoi(rest[:end]); convErr == nil && end+2 <= len(rest) && rest[end:end+2] == ": " {
			e.Line = n + lineOffset
			e.Detail = rest[end+2:]
		}
	}
	return e
}
