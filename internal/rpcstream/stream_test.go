package rpcstream

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzPrepare: whatever a peer sends, the Stream never panics, every reply
// it makes is one valid JSON-RPC error response, and a request it hands
// over has a string method and params that are a JSON object or array.
func FuzzPrepare(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"ping","id":1}`,
		`{"jsonrpc":"2.0","method":"ping","params":{"a":[1,2]},"id":"x"}`,
		`{"jsonrpc":"2.0","result":{},"id":3}`,
		`{"jsonrpc":"2.0","method":"x"}`,
		`{"jsonrpc":"1.0","method":"x","id":null}`,
		`{"id":{}}`, `[]`, `42`, `"s"`, `{"method":5}`,
		`{"jsonrpc":"2.0","method":"\u0070ing","id":1}`, `{"jsonrpc":"2.0","method":"sendMessag","id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		s := &Stream{pending: make(map[string]pendingReply)}
		msg, reply := s.prepare(data)
		if msg.method != nil {
			var method string
			if json.Unmarshal(msg.method, &method) != nil {
				t.Fatalf("handed over method %q for %q", msg.method, data)
			}
			if name, ok := methodName(msg.method); !ok || name != method {
				t.Fatalf("method %s read as %q, %v; json.Unmarshal says %q", msg.method, name, ok, method)
			}
			if msg.params != nil && (!json.Valid(msg.params) || (msg.params[0] != '{' && msg.params[0] != '[')) {
				t.Fatalf("handed over params %q for %q", msg.params, data)
			}
		}
		if reply != nil {
			var r map[string]json.RawMessage
			err := json.Unmarshal(reply, &r)
			if err != nil || string(r["jsonrpc"]) != `"2.0"` || r["id"] == nil || r["error"] == nil || len(r) != 3 {
				t.Fatalf("bad error reply %q for %q", reply, data)
			}
		}
		if msg.method != nil && reply != nil {
			t.Fatalf("both a message and a reply for %q", data)
		}
	})
}

func TestPrepareRenamesIDs(t *testing.T) {
	s := &Stream{pending: make(map[string]pendingReply)}
	msg, reply := s.prepare([]byte(`{"jsonrpc":"2.0","method":"ping","params":{},"id":1.0e3}`))
	if reply != nil {
		t.Fatalf("reply %s", reply)
	}
	if string(msg.method) != `"ping"` || string(msg.params) != `{}` || msg.synthetic != "~r1" {
		t.Fatalf("msg = %s %s %q, want \"ping\" {} \"~r1\"", msg.method, msg.params, msg.synthetic)
	}
	if p, ok := s.pending["~r1"]; !ok || string(p.id) != "1.0e3" {
		t.Fatalf("pending = %+v", s.pending)
	}
}

// The Stream's own calls are answered inside the Stream: a result, an
// error object, and, once the connection fails, ErrClosed.
func TestAnswerCalls(t *testing.T) {
	s := &Stream{pending: make(map[string]pendingReply), calls: make(map[uint64]Answerer)}
	results, errs := make(chanAnswer, 1), make(chanAnswer, 1)
	s.calls[7], s.calls[8] = results, errs
	for _, in := range []string{
		`{"jsonrpc":"2.0","id":7,"result":{"processed":true}}`,
		`{"jsonrpc":"2.0","id":8,"error":{"code":-32000,"message":"no"}}`,
	} {
		if msg, reply := s.prepare([]byte(in)); msg.method != nil || reply != nil {
			t.Fatalf("%s: handed on %+v, replied %s", in, msg, reply)
		}
		s.handAnswers()
	}
	if r := <-results; r.err != nil || string(r.result) != `{"processed":true}` {
		t.Fatalf("result = %s, %v", r.result, r.err)
	}
	if r := <-errs; r.err == nil || r.err.Error() != "error -32000: no" {
		t.Fatalf("error = %v", r.err)
	}
	// An answer to no call of the Stream's answers nothing: dropped.
	if msg, reply := s.prepare([]byte(`{"jsonrpc":"2.0","id":9,"result":{}}`)); msg.method != nil || reply != nil {
		t.Fatalf("unknown answer: handed on %+v, replied %s", msg, reply)
	}
	waiting := make(chanAnswer, 1)
	s.calls[10] = waiting
	s.failCalls()
	if r := <-waiting; r.err != ErrClosed {
		t.Fatalf("after failCalls: %v", r.err)
	}
	// A call made after the end was never written: the peer cannot have
	// seen it, which the bus tells from a call the close cut off.
	if _, err := s.CallAsync("processMessage", nil, make(chanAnswer, 1)); !errors.Is(err, ErrNotSent) || !errors.Is(err, ErrClosed) {
		t.Fatalf("call after the end: %v, want ErrNotSent and ErrClosed", err)
	}
}

// FuzzReadEnvelope holds readEnvelope to the json.Unmarshal decode it
// replaced: every member the same bytes, absent members nil.
func FuzzReadEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"ping","params":{"a":[1,"}"]},"id":1}`,
		`{"JSONRPC":"2.0","Method":"x","ID":null,"id":"y"}`, `{"\u0069d":1,"result":null,"error":{}}`,
		`{"jſonrpc":"2.0","paramſ":[],"reſult":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || firstByte(data) != '{' {
			return
		}
		var want struct {
			JSONRPC json.RawMessage `json:"jsonrpc"`
			Method  json.RawMessage `json:"method"`
			Params  json.RawMessage `json:"params"`
			ID      json.RawMessage `json:"id"`
			Result  json.RawMessage `json:"result"`
			Error   json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got := readEnvelope(data)
		for _, m := range []struct {
			name      string
			got, want json.RawMessage
		}{{"jsonrpc", got.JSONRPC, want.JSONRPC}, {"method", got.Method, want.Method}, {"params", got.Params, want.Params}, {"id", got.ID, want.ID}, {"result", got.Result, want.Result}, {"error", got.Error, want.Error}} {
			if string(m.got) != string(m.want) || (m.got == nil) != (m.want == nil) {
				t.Fatalf("%s: %s is %q, json.Unmarshal says %q", data, m.name, m.got, m.want)
			}
		}
	})
}
