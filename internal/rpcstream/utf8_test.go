package rpcstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// loopback serves one WebSocket connection on 127.0.0.1 and returns the
// client's end and the server's Stream.
func loopback(t testing.TB) (*websocket.Conn, *Stream) {
	t.Helper()
	streams := make(chan *Stream, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		streams <- New(ws, 5*time.Second)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws://"+srv.Listener.Addr().String(), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = client.CloseNow() })
	select {
	case s := <-streams:
		t.Cleanup(func() { _ = s.Close() })
		return client, s
	case <-ctx.Done():
		t.Fatal("no connection accepted")
	}
	return nil, nil
}

// readAll reads requests until the Stream fails, in the background, and
// returns what it handed over and the error it ended with.
func readAll(s *Stream) <-chan readResult {
	done := make(chan readResult, 1)
	go func() {
		var r readResult
		for {
			req, err := s.ReadRequest()
			if err != nil {
				r.err = err
				done <- r
				return
			}
			r.reqs = append(r.reqs, req)
			if !req.Notif() {
				_ = s.Reply(req.ID, "ok", nil)
			}
		}
	}()
	return done
}

type readResult struct {
	reqs []*Request
	err  error
}

// TestInvalidUTF8FailsConnection: a text message that is not valid UTF-8,
// even only inside a JSON string, fails the connection with 1007 naming
// the byte, hands nothing of itself over, and fails the Stream's own
// calls; valid UTF-8 of every width before it passes untouched.
func TestInvalidUTF8FailsConnection(t *testing.T) {
	for name, frame := range map[string]string{
		"in a payload string":  `{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":{"text":"a` + "\xff" + `"}},"id":2}`,
		"a lone continuation":  `{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"` + "\x80" + `"},"id":2}`,
		"a truncated rune":     `{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"` + "\xe2\x82" + `"},"id":2}`,
		"an encoded surrogate": `{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"` + "\xed\xa0\x80" + `"},"id":2}`,
		"in a batch":           `[{"jsonrpc":"2.0","method":"ping","id":3},{"jsonrpc":"2.0","method":"x` + "\xc0\xaf" + `"}]`,
		"in an answer":         `{"jsonrpc":"2.0","id":0,"result":{"note":"` + "\xff" + `"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			client, s := loopback(t)
			calls := make(chan error, 1)
			go func() {
				_, err := s.Call(context.Background(), "processMessage", []byte(`{}`), nil)
				calls <- err
			}()
			done := readAll(s)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// The Stream's call is on the wire first; read it off.
			if _, _, err := client.Read(ctx); err != nil {
				t.Fatalf("read the Stream's call: %v", err)
			}
			good := `{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"é € 😀"},"id":1}`
			for _, f := range []string{good, frame} {
				if err := client.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			var reply []byte
			var err error
			for err == nil {
				_, reply, err = client.Read(ctx)
				if err == nil && !strings.Contains(string(reply), `"id":1`) {
					t.Errorf("answered %s", reply)
				}
			}
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusInvalidFramePayloadData || !strings.Contains(ce.Reason, "not valid UTF-8 at byte") {
				t.Fatalf("client read ended with %v, want close 1007 naming the byte", err)
			}
			r := <-done
			if !errors.Is(r.err, ErrInvalidUTF8) {
				t.Errorf("ReadRequest ended with %v, want ErrInvalidUTF8", r.err)
			}
			if len(r.reqs) != 1 || string(r.reqs[0].Params) != `{"payload":"é € 😀"}` {
				t.Errorf("handed over %d requests, want only the valid one, byte for byte", len(r.reqs))
			}
			if err := <-calls; !errors.Is(err, ErrClosed) {
				t.Errorf("the Stream's call ended with %v, want ErrClosed", err)
			}
		})
	}
}

func TestInvalidUTF8At(t *testing.T) {
	for in, want := range map[string]int{"": -1, "abc": -1, "é € 😀": -1, "ab\xff": 2, "é\x80": 2, "\xe2\x82": 0, "😀\xed\xa0\x80": 4} {
		if got := InvalidUTF8At([]byte(in)); got != want {
			t.Errorf("InvalidUTF8At(%q) = %d, want %d", in, got, want)
		}
	}
}

// FuzzReadRequest sends any text message over loopback: when it is not
// valid UTF-8 the Stream fails with ErrInvalidUTF8 and hands nothing over;
// otherwise every request it hands over has params that are valid JSON
// and valid UTF-8, slices of what was sent.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"ping","id":1}`,
		`{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"é"},"id":1}`,
		`{"jsonrpc":"2.0","method":"sendMessage","params":{"payload":"` + "\xff" + `"},"id":1}`,
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b","params":["` + "\xc3" + `"]}]`,
		"\xef\xbb\xbf{}", `"\udc00"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		client, s := loopback(t)
		done := readAll(s)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Reading the answers, and the close frame, lets the Stream's
		// close handshake finish at once.
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for {
				if _, _, err := client.Read(ctx); err != nil {
					return
				}
			}
		}()
		defer func() { <-drained }()
		if err := client.Write(ctx, websocket.MessageText, data); err != nil {
			t.Fatalf("write: %v", err)
		}
		if utf8.Valid(data) {
			// Something the Stream cannot mistake for the fuzzed
			// message ends the read once everything before it is in.
			if err := client.Write(ctx, websocket.MessageText, []byte("\xff")); err != nil {
				t.Fatalf("write: %v", err)
			}
		}
		r := <-done
		if !errors.Is(r.err, ErrInvalidUTF8) {
			t.Fatalf("ReadRequest ended with %v, want ErrInvalidUTF8", r.err)
		}
		if !utf8.Valid(data) && len(r.reqs) > 0 {
			t.Fatalf("handed over %d requests from a message that is not UTF-8", len(r.reqs))
		}
		for _, req := range r.reqs {
			if req.Params != nil && (!json.Valid(req.Params) || !utf8.Valid(req.Params)) {
				t.Fatalf("handed over params %q", req.Params)
			}
			if !utf8.ValidString(req.Method) {
				t.Fatalf("handed over method %q", req.Method)
			}
		}
	})
}
