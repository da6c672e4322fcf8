package a2a

import (
	"bytes"
	"encoding/json"
	"strings"
)

// protoNames rewrites params' keys written as proto field names
// (history_length) to their JSON names (historyLength): A2A's JSON is
// ProtoJSON, whose parsers accept both, and clients send either (the
// official TCK sends history_length). Where both are given the JSON
// name wins. The values of Struct fields, metadata and a data part's
// data, are the client's own and kept as they are. Params that cannot
// hold such a key, or are not JSON, come back unchanged.
func protoNames(params json.RawMessage) json.RawMessage {
	if bytes.IndexByte(params, '_') < 0 {
		return params
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return params
	}
	out, err := json.Marshal(jsonNames(v))
	if err != nil {
		return params
	}
	return out
}

// jsonNames is protoNames on a decoded value.
func jsonNames(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, val := range x {
			if k != "metadata" && k != "data" {
				val = jsonNames(val)
			}
			name := lowerCamel(k)
			if _, both := x[name]; both && name != k {
				continue // the JSON name's value wins
			}
			m[name] = val
		}
		return m
	case []any:
		for i := range x {
			x[i] = jsonNames(x[i])
		}
	}
	return v
}

// lowerCamel is the JSON name protoc derives from a field name: each
// underscore dropped and the letter after it upper-cased.
func lowerCamel(name string) string {
	if !strings.Contains(name, "_") {
		return name
	}
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
