package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzMembers holds Members, String and KeyIs to encoding/json: over any
// valid JSON object, the members read in place (keys decoded, the last of
// duplicates winning) are what json.Unmarshal into a map gives, and a key
// matches a field name exactly when json.Unmarshal would fill that field
// from it.
func FuzzMembers(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a":1}`, ` { "a" : [1, {"b":"}"}] , "c":"x\"y\\" } `,
		`{"type":"t","Type":null,"TYPE":{"x":[]}}`, `{"\u0074opic":"a\u00e9","a":true,"a":false}`,
		`{"jſonrpc":1,"K":"\\\\"}`, `{"x":-1.5e3,"y":"\ud800","z":"\u0000"}`, "{\"\xff\":1}",
	} {
		f.Add([]byte(seed), "topic")
		f.Add([]byte(seed), "jsonrpc")
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if !json.Valid(data) {
			return
		}
		var want map[string]json.RawMessage
		if json.Unmarshal(data, &want) != nil {
			return // not an object
		}
		got := make(map[string]json.RawMessage)
		for key, value := range Members(data) {
			k, ok := String(key)
			if !ok {
				t.Fatalf("key %q did not decode as a string", key)
			}
			got[k] = value
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, json.Unmarshal found %d", data, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%q: member %q is %q, json.Unmarshal says %q", data, k, got[k], v)
			}
		}

		// KeyIs against json.Unmarshal into a struct with one field
		// tagged name, which fills the field from the last matching key.
		if name == "" || strings.ContainsFunc(name, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_')
		}) {
			return
		}
		typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[json.RawMessage](), Tag: reflect.StructTag(`json:"` + name + `"`)}})
		target := reflect.New(typ)
		if err := json.Unmarshal(data, target.Interface()); err != nil {
			t.Fatal(err)
		}
		var last []byte
		for key, value := range Members(data) {
			if KeyIs(key, name) {
				last = value
			}
		}
		if want := target.Elem().Field(0).Bytes(); !bytes.Equal(last, want) {
			t.Fatalf("%q: field %q read as %q, json.Unmarshal fills it with %q", data, name, last, want)
		}
	})
}

func TestValueEndAndKind(t *testing.T) {
	tests := []struct {
		in, value, kind string
	}{
		{`"a\"b" ,`, `"a\"b"`, "string"},
		{`"\\" ,`, `"\\"`, "string"},
		{`{"a":"}"} ]`, `{"a":"}"}`, "object"},
		{`[1,[2],{"x":[]}],`, `[1,[2],{"x":[]}]`, "array"},
		{`-1.5e3}`, `-1.5e3`, "number"},
		{`true,`, `true`, "bool"},
		{`null`, `null`, "null"},
	}
	for _, tt := range tests {
		got := tt.in[:ValueEnd([]byte(tt.in), 0)]
		if got != tt.value {
			t.Errorf("ValueEnd(%q) ends at %q, want %q", tt.in, got, tt.value)
		}
		if k := Kind([]byte(got)); k != tt.kind {
			t.Errorf("Kind(%q) = %q, want %q", got, k, tt.kind)
		}
	}
}

// A plain string costs String one allocation, the string itself (it cost
// two while the slow path's variable lived on the heap for every call):
// every string of every message the bus and the SDK read goes through it.
func TestStringAllocations(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		allocs   float64
	}{
		{`"bench:t1:abc"`, "bench:t1:abc", 1},
		{`""`, "", 0},
	} {
		in := []byte(tt.in)
		var got string
		var ok bool
		allocs := testing.AllocsPerRun(100, func() { got, ok = String(in) })
		if !ok || got != tt.want {
			t.Errorf("String(%s) = %q, %v, want %q", tt.in, got, ok, tt.want)
		}
		if allocs != tt.allocs {
			t.Errorf("String(%s) makes %v allocations, want %v", tt.in, allocs, tt.allocs)
		}
	}
}
