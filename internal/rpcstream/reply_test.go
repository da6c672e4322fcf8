package rpcstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/outbound"
)

// serveStream serves one WebSocket connection on loopback with a Stream
// over outbound's writer, as the bus and the peer SDK do, answering every
// request with answer; it returns the client's end.
func serveStream(t *testing.T, answer func(s *Stream, r *Request)) *websocket.Conn {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, out, err := outbound.Accept(w, r, nil, 5*time.Second)
		if err != nil {
			return
		}
		s := NewOutbound(ws, out)
		for {
			req, err := s.ReadRequest()
			if err != nil {
				return
			}
			answer(s, req)
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):], nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// ReplyRaw writes the same response as Reply given the same result, alone
// and within a batch, under the peer's own id; the buffer it was given
// may be overwritten at once.
func TestReplyRawAsReply(t *testing.T) {
	ws := serveStream(t, func(s *Stream, r *Request) {
		if r.Notif() {
			return
		}
		result := []byte(`{"processed":true,"message":"<&>"}`)
		if r.Method == "raw" {
			err := s.ReplyRaw(r.ID, result)
			copy(result, "XXXXXXXXXXXX")
			if err != nil {
				t.Error(err)
			}
			return
		}
		// Reply marshals a json.RawMessage compacted, and escapes <, >
		// and & in it: the bytes differ, so it answers an
		// equivalent value of its own.
		if err := s.Reply(r.ID, map[string]any{"processed": true, "message": "&"}, nil); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct{ send, want string }{
		{`{"jsonrpc":"2.0","method":"raw","id":"a b"}`, `{"id":"a b","result":{"processed":true,"message":"<&>"},"jsonrpc":"2.0"}`},
		{`{"jsonrpc":"2.0","method":"marshal","id":1.5e3}`, `{"id":1.5e3,"result":{"message":"\u0026","processed":true},"jsonrpc":"2.0"}`},
		{`[{"jsonrpc":"2.0","method":"raw","id":1},{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"2.0","method":"marshal","id":2}]`,
			`[{"id":1,"result":{"processed":true,"message":"<&>"},"jsonrpc":"2.0"},{"id":2,"result":{"message":"\u0026","processed":true},"jsonrpc":"2.0"}]`},
		// A batch larger than the queue keeps, then a request alone:
		// the queue starts again empty either way.
		{`[` + strings.Repeat(`{"jsonrpc":"2.0","method":"raw","id":3},`, 11) + `{"jsonrpc":"2.0","method":"raw","id":4}]`,
			`[` + strings.Repeat(`{"id":3,"result":{"processed":true,"message":"<&>"},"jsonrpc":"2.0"},`, 11) + `{"id":4,"result":{"processed":true,"message":"<&>"},"jsonrpc":"2.0"}]`},
		{`{"jsonrpc":"2.0","method":"raw","id":5}`, `{"id":5,"result":{"processed":true,"message":"<&>"},"jsonrpc":"2.0"}`},
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s\nanswered %s\n    want %s", tc.send, got, tc.want)
		}
	}
}

// A reply to a request the Stream does not know (answered already) is an
// error, and writes nothing.
func TestReplyRawUnknownRequest(t *testing.T) {
	s := &Stream{pending: make(map[string]pendingReply)}
	if err := s.ReplyRaw("~r7", []byte(`{}`)); err == nil {
		t.Fatal("a reply to an unknown request succeeded")
	}
}
