// Package a2atest is a raw A2A JSON-RPC client for tests: it posts
// requests as bytes, reads answers and SSE streams event by event with
// their ids, so that tests see exactly what a server sends, which
// a2a-go's client does not show (SSE ids, Last-Event-ID).
package a2atest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/bub-bus/bub/a2a"
)

// Timeout bounds every wait in this package.
const Timeout = 10 * time.Second

// Response is a JSON-RPC response as read from the wire.
type Response struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *a2a.Error      `json:"error"`
}

// Decode decodes r's result into v, failing on an error answer.
func (r Response) Decode(t testing.TB, v any) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error answer: %d %s", r.Error.Code, r.Error.Message)
	}
	if err := json.Unmarshal(r.Result, v); err != nil {
		t.Fatalf("decode result %s: %v", r.Result, err)
	}
}

// WantCode fails unless r is an error answer with code.
func (r Response) WantCode(t testing.TB, code int) {
	t.Helper()
	if r.Error == nil || r.Error.Code != code {
		t.Fatalf("want error %d, got %s / %+v", code, r.Result, r.Error)
	}
}

// Do posts one JSON-RPC request, with A2A-Version 1.0 and headers
// (pairs of name and value), and returns the HTTP answer.
func Do(t testing.TB, url, method string, params any, headers ...string) *http.Response {
	t.Helper()
	resp, err := do(t.Context(), url, method, params, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// do is Do for any goroutine: it returns what went wrong.
func do(ctx context.Context, url, method string, params any, headers ...string) (*http.Response, error) {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return resp, nil
}

// Post is Do for an answer that is not a stream, which it decodes.
func Post(t testing.TB, url, method string, params any, headers ...string) Response {
	t.Helper()
	resp := Do(t, url, method, params, headers...)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	var r Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s: decode answer: %v", method, err)
	}
	return r
}

// UserMessage is a SendMessage's params: a user message of text with
// messageId id.
func UserMessage(id, text string) map[string]any {
	return map[string]any{"message": map[string]any{
		"messageId": id, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}},
	}}
}

// Submit sends a SendMessage with returnImmediately and returns the
// task it answers.
func Submit(t testing.TB, url, id, text string, headers ...string) *spec.Task {
	t.Helper()
	task, err := TrySubmit(t.Context(), url, id, text, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TrySubmit is Submit for a goroutine other than the test's, which must
// not call t.Fatal: it returns what went wrong.
func TrySubmit(ctx context.Context, url, id, text string, headers ...string) (*spec.Task, error) {
	params := UserMessage(id, text)
	params["configuration"] = map[string]any{"returnImmediately": true}
	r, err := TryPost(ctx, url, "SendMessage", params, headers...)
	if err != nil {
		return nil, err
	}
	var sr spec.StreamResponse
	if err := json.Unmarshal(r.Result, &sr); err != nil {
		return nil, fmt.Errorf("SendMessage: result %s: %w", r.Result, err)
	}
	task, ok := sr.Event.(*spec.Task)
	if !ok {
		return nil, fmt.Errorf("SendMessage answered %T, want a task", sr.Event)
	}
	return task, nil
}

// TryPost is Post for a goroutine other than the test's: it returns
// what went wrong, an error answer included.
func TryPost(ctx context.Context, url, method string, params any, headers ...string) (Response, error) {
	resp, err := do(ctx, url, method, params, headers...)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	var r Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: HTTP %d: %w", method, resp.StatusCode, err)
	}
	if r.Error != nil {
		return r, fmt.Errorf("%s: %w", method, r.Error)
	}
	return r, nil
}

// AwaitState polls GetTask until task id is in state, and fails with the
// last state seen after Timeout.
func AwaitState(t testing.TB, url string, id spec.TaskID, state spec.TaskState, headers ...string) *spec.Task {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		var got spec.Task
		Post(t, url, "GetTask", map[string]any{"id": id}, headers...).Decode(t, &got)
		if got.Status.State == state {
			return &got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s after %v, want %s", id, got.Status.State, Timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // a poll's interval
	}
}

// Event is one SSE event of a stream.
type Event struct {
	// ID is the SSE id, the task's sequence number; 0 for none.
	ID  uint64
	Res Response
}

// Decode returns the event's StreamResponse.
func (ev Event) Decode(t testing.TB) spec.Event {
	t.Helper()
	var sr spec.StreamResponse
	ev.Res.Decode(t, &sr)
	return sr.Event
}

// Stream is an open SSE answer.
type Stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// OpenStream posts a streaming request and checks that SSE comes back;
// the stream closes when the test ends, or with Close.
func OpenStream(t testing.TB, url, method string, params any, headers ...string) *Stream {
	t.Helper()
	resp := Do(t, url, method, params, headers...)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: HTTP %d %s: %s", method, resp.StatusCode, ct, b)
	}
	s := &Stream{resp: resp, sc: bufio.NewScanner(resp.Body)}
	s.sc.Buffer(nil, 1<<20)
	t.Cleanup(s.Close)
	return s
}

// Close drops the stream, as a client that loses its connection.
func (s *Stream) Close() { s.resp.Body.Close() }

// Next reads the next event; ok is false at the stream's end.
func (s *Stream) Next(t testing.TB) (ev Event, ok bool) {
	t.Helper()
	var data string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && data != "":
			if err := json.Unmarshal([]byte(data), &ev.Res); err != nil {
				t.Fatalf("event %d: %v: %s", ev.ID, err, data)
			}
			return ev, true
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseUint(line[4:], 10, 64)
			if err != nil {
				t.Fatalf("SSE id %q: %v", line, err)
			}
			ev.ID = n
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	return ev, false
}

// UntilStatusText reads events until a status update whose message is
// text, and returns its id. Events before it are skipped: the bus's ack
// of the publish adds a working event of its own, before or after the
// agent's first answer.
func (s *Stream) UntilStatusText(t testing.TB, text string) uint64 {
	t.Helper()
	for {
		ev, ok := s.Next(t)
		if !ok {
			t.Fatalf("the stream ended before a status with message %q", text)
		}
		su, isStatus := ev.Decode(t).(*spec.TaskStatusUpdateEvent)
		if isStatus && su.Status.Message != nil && su.Status.Message.Parts[0].Text() == text {
			return ev.ID
		}
	}
}

// All reads events until the stream ends.
func (s *Stream) All(t testing.TB) []Event {
	t.Helper()
	var evs []Event
	for {
		ev, ok := s.Next(t)
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

// CheckResumed fails unless evs are exactly the n events after
// lastEventID, with consecutive ids: no gap, no repeat.
func CheckResumed(t testing.TB, evs []Event, lastEventID uint64, n int) {
	t.Helper()
	if len(evs) != n {
		t.Fatalf("resumed with %d events, want the %d missed", len(evs), n)
	}
	for i, ev := range evs {
		if want := lastEventID + 1 + uint64(i); ev.ID != want {
			t.Fatalf("event %d has id %d, want %d: a gap or a repeat", i, ev.ID, want)
		}
	}
}

// AwaitCard reads the card of the agent at url, polling while the server
// answers 503 (an A2A door starting beside its bus), and fails with the
// last error after Timeout.
func AwaitCard(t testing.TB, url string) *spec.AgentCard {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		card, err := agentcard.NewResolver(http.DefaultClient).Resolve(t.Context(), url)
		var status *agentcard.ErrStatusNotOK
		switch {
		case err == nil:
			return card
		case !errors.As(err, &status) || status.StatusCode != http.StatusServiceUnavailable:
			t.Fatalf("discover %s: %v", url, err)
		case time.Now().After(deadline):
			t.Fatalf("discover %s: still %v after %v", url, err, Timeout)
		}
		time.Sleep(10 * time.Millisecond) // a poll's interval
	}
}
