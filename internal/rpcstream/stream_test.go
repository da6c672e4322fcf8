package rpcstream

import (
	"encoding/json"
	"testing"
)

// FuzzPrepare: whatever a peer sends, the Stream never panics, every reply
// it makes is one valid JSON-RPC error response, and what it hands to
// jsonrpc2 is valid JSON.
func FuzzPrepare(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"ping","id":1}`,
		`{"jsonrpc":"2.0","method":"ping","params":{"a":[1,2]},"id":"x"}`,
		`{"jsonrpc":"2.0","result":{},"id":3}`,
		`{"jsonrpc":"2.0","method":"x"}`,
		`{"jsonrpc":"1.0","method":"x","id":null}`,
		`{"id":{}}`, `[]`, `42`, `"s"`, `{"method":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		s := &Stream{pending: make(map[string]*pendingReply)}
		msg, reply := s.prepare(data, nil)
		if msg != nil && !json.Valid(msg) {
			t.Fatalf("handed jsonrpc2 invalid JSON %q for %q", msg, data)
		}
		if reply != nil {
			var r map[string]json.RawMessage
			err := json.Unmarshal(reply, &r)
			if err != nil || string(r["jsonrpc"]) != `"2.0"` || r["id"] == nil || r["error"] == nil || len(r) != 3 {
				t.Fatalf("bad error reply %q for %q", reply, data)
			}
		}
		if msg != nil && reply != nil {
			t.Fatalf("both a message and a reply for %q", data)
		}
	})
}

func TestPrepareRenamesIDs(t *testing.T) {
	s := &Stream{pending: make(map[string]*pendingReply)}
	msg, reply := s.prepare([]byte(`{"jsonrpc":"2.0","method":"ping","params":{},"id":1.0e3}`), nil)
	if reply != nil {
		t.Fatalf("reply %s", reply)
	}
	want := `{"jsonrpc":"2.0","method":"ping","params":{},"id":"~r1"}`
	if string(msg) != want {
		t.Fatalf("msg = %s, want %s", msg, want)
	}
	if p := s.pending["~r1"]; p == nil || string(p.id) != "1.0e3" {
		t.Fatalf("pending = %+v", s.pending)
	}
}
