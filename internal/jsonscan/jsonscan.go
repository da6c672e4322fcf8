// Package jsonscan reads JSON in place: the members of an object, as byte
// slices of the input, without decoding or copying their values.
//
// It trusts its input to be valid JSON (json.Valid said so): it is the
// second look at bytes the standard library already checked, so it skips
// values by their brackets and quotes instead of parsing them. On invalid
// input its results are unspecified, but it never panics or loops.
//
// Key matching follows encoding/json exactly (a key is unescaped, then
// matched without regard to case, as bytes.EqualFold does), so code that
// moves from json.Unmarshal to this package accepts the same documents.
// The fuzz tests hold it to encoding/json.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"iter"
	"strings"
	"unicode/utf8"
)

// Members yields the members of obj, a JSON object, in document order:
// each key raw (quotes and escapes included, see KeyIs) and its value raw
// (no surrounding whitespace). Duplicate keys are all yielded; as with
// encoding/json, the last one should win. obj that is not an object
// yields nothing.
func Members(obj []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(key, value []byte) bool) {
		i := skipSpace(obj, 0)
		if i >= len(obj) || obj[i] != '{' {
			return
		}
		i++
		for {
			i = skipSpace(obj, i)
			if i >= len(obj) || obj[i] != '"' {
				return // '}' or invalid input
			}
			keyEnd := stringEnd(obj, i)
			key := obj[i:keyEnd]
			i = skipSpace(obj, keyEnd)
			if i >= len(obj) || obj[i] != ':' {
				return
			}
			i = skipSpace(obj, i+1)
			end := ValueEnd(obj, i)
			if end <= i {
				return
			}
			if !yield(key, obj[i:end]) {
				return
			}
			i = skipSpace(obj, end)
			if i >= len(obj) || obj[i] != ',' {
				return
			}
			i++
		}
	}
}

// KeyIs reports whether the raw key (as Members yields it) names the
// field name the way encoding/json matches it: unescaped, then equal
// under Unicode case folding. name must be plain ASCII.
func KeyIs(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	inner := key[1 : len(key)-1]
	// Every escape and every multi-byte rune takes two bytes or more for
	// the one character it decodes to (folding keeps the count), so a key
	// matches an ASCII name of its own length only as plain ASCII,
	// compared in place, and never one longer than itself; only a longer
	// key needs looking into, and decoding if it has either.
	switch {
	case len(inner) == len(name):
		for i, c := range inner {
			if lower(c) != lower(name[i]) {
				return false
			}
		}
		return true
	case len(inner) < len(name):
		return false
	}
	for _, c := range inner {
		if c >= utf8.RuneSelf || c == '\\' {
			s, ok := String(key)
			return ok && strings.EqualFold(s, name)
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// String decodes raw, a JSON value, as encoding/json decodes it into a
// string (escapes resolved, invalid UTF-8 replaced); ok is false when raw
// is not a string.
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner, ok := Plain(raw); ok {
		return string(inner), true
	}
	return decodeString(raw)
}

// Plain returns the contents of raw, a JSON string, when they are the
// string's bytes as they are: ASCII, no escape, no control character.
// ok is false for any other value; String decodes those.
func Plain(raw []byte) (inner []byte, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	inner = raw[1 : len(raw)-1]
	for _, c := range inner {
		if c >= utf8.RuneSelf || c == '\\' || c < 0x20 {
			return nil, false
		}
	}
	return inner, true
}

// decodeString is String's way for a string with escapes or non-ASCII
// bytes. It is a function of its own because the string json.Unmarshal
// decodes into lives on the heap: in String itself it did for every
// string, the plain ones too, one allocation more each.
func decodeString(raw []byte) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// Kind names the JSON type of raw as encoding/json's UnmarshalTypeError
// does: "string", "number", "bool", "array", "object", or "null".
func Kind(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// IsNull reports whether raw is the JSON null.
func IsNull(raw []byte) bool {
	return len(raw) == 4 && string(raw) == "null"
}

// ValueEnd returns the index just past the JSON value that starts at
// data[i] (not whitespace), or i when there is none.
func ValueEnd(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	// A number or literal runs to the next delimiter.
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// stringEnd returns the index just past the string whose opening quote is
// data[i]. The closing quote is the first one not escaped: found with
// IndexByte, which is fast on long strings, then checked for an odd run
// of backslashes before it.
func stringEnd(data []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return len(data)
		}
		j += k
		backslashes := 0
		for b := j - 1; b > i && data[b] == '\\'; b-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j + 1
		}
		j++
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Elements yields the elements of arr, a JSON array, in order, each raw
// (no surrounding whitespace). arr that is not an array yields nothing.
func Elements(arr []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		i := skipSpace(arr, 0)
		if i >= len(arr) || arr[i] != '[' {
			return
		}
		i = skipSpace(arr, i+1)
		if i < len(arr) && arr[i] == ']' {
			return
		}
		for {
			end := ValueEnd(arr, i)
			if end <= i || !yield(arr[i:end]) {
				return
			}
			i = skipSpace(arr, end)
			if i >= len(arr) || arr[i] != ',' {
				return
			}
			i = skipSpace(arr, i+1)
		}
	}
}
