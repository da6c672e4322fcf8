package a2a_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
)

// fixture is a bus on loopback and an A2A server in front of it.
type fixture struct {
	bus  *bustest.Server
	srv  *a2a.Server
	http *httptest.Server
	opts a2a.Options
}

// start starts a bus and an A2A server serving agents, with its task
// store in a fresh directory.
func start(t *testing.T, agents ...a2a.Agent) *fixture {
	t.Helper()
	f := &fixture{bus: bustest.Start(t, nil)}
	f.opts = a2a.Options{
		BusURL: f.bus.URL,
		Agents: agents,
		Path:   filepath.Join(t.TempDir(), "a2a.db"),
		Logger: slog.New(slog.DiscardHandler),
	}
	f.open(t)
	return f
}

// open (re)starts the A2A server on the fixture's options.
func (f *fixture) open(t *testing.T) {
	t.Helper()
	srv, err := a2a.New(t.Context(), &f.opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.http = httptest.NewServer(srv)
	t.Cleanup(f.close)
}

// close stops the HTTP side and the A2A server; twice is once.
func (f *fixture) close() {
	if f.srv == nil {
		return
	}
	f.http.CloseClientConnections()
	f.http.Close()
	f.srv.Close()
	f.srv = nil
}

// url is agent's JSON-RPC URL.
func (f *fixture) url(agent string) string { return f.http.URL + "/a2a/" + agent }

// rpcResponse is a JSON-RPC response as the tests read it.
type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *a2a.Error      `json:"error"`
}

// post sends one JSON-RPC request with headers (pairs of name, value)
// and returns the answer.
func post(t *testing.T, url, method string, params any, headers ...string) rpcResponse {
	t.Helper()
	resp := do(t, url, method, params, headers...)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	var r rpcResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s: decode answer: %v", method, err)
	}
	return r
}

func do(t *testing.T, url, method string, params any, headers ...string) *http.Response {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// result decodes r's result into v, failing on an error answer.
func (r rpcResponse) result(t *testing.T, v any) {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error answer: %d %s", r.Error.Code, r.Error.Message)
	}
	if err := json.Unmarshal(r.Result, v); err != nil {
		t.Fatalf("decode result %s: %v", r.Result, err)
	}
}

// wantCode fails unless r is an error answer with code.
func (r rpcResponse) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.Error == nil || r.Error.Code != code {
		t.Fatalf("want error %d, got %s / %+v", code, r.Result, r.Error)
	}
}

// userMessage is a SendMessage's params with text and messageId id.
func userMessage(id, text string) map[string]any {
	return map[string]any{"message": map[string]any{
		"messageId": id, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}},
	}}
}

// submit sends a SendMessage with returnImmediately and returns the
// task it answers.
func submit(t *testing.T, url, id, text string, headers ...string) *spec.Task {
	t.Helper()
	params := userMessage(id, text)
	params["configuration"] = map[string]any{"returnImmediately": true}
	var sr spec.StreamResponse
	post(t, url, "SendMessage", params, headers...).result(t, &sr)
	task, ok := sr.Event.(*spec.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", sr.Event)
	}
	return task
}

// awaitState polls GetTask until task id is in state, and fails with
// the last state seen after bustest.Timeout.
func awaitState(t *testing.T, url string, id spec.TaskID, state spec.TaskState) *spec.Task {
	t.Helper()
	deadline := time.Now().Add(bustest.Timeout)
	for {
		var got spec.Task
		post(t, url, "GetTask", map[string]any{"id": id}).result(t, &got)
		if got.Status.State == state {
			return &got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s after %v, want %s", id, got.Status.State, bustest.Timeout, state)
		}
		time.Sleep(10 * time.Millisecond) // a poll's interval, as checkFor
	}
}

// event is one SSE event of a stream.
type event struct {
	ID  uint64
	Res rpcResponse
}

// stream is an open SSE answer.
type stream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// openStream posts a streaming request and checks that SSE comes back.
func openStream(t *testing.T, url, method string, params any, headers ...string) *stream {
	t.Helper()
	resp := do(t, url, method, params, headers...)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: HTTP %d %s: %s", method, resp.StatusCode, ct, b)
	}
	s := &stream{resp: resp, sc: bufio.NewScanner(resp.Body)}
	s.sc.Buffer(nil, 1<<20)
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.resp.Body.Close() }

// next reads the next event; ok is false at the stream's end.
func (s *stream) next(t *testing.T) (ev event, ok bool) {
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

// all reads events until the stream ends.
func (s *stream) all(t *testing.T) []event {
	t.Helper()
	var evs []event
	for {
		ev, ok := s.next(t)
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

// decodeEvent returns an event's StreamResponse.
func decodeEvent(t *testing.T, ev event) spec.Event {
	t.Helper()
	var sr spec.StreamResponse
	ev.Res.result(t, &sr)
	return sr.Event
}

// scriptedAgent is an A2A-aware agent on the bus: it hands each message
// it gets to the test, which answers on the message's reply_to.
type scriptedAgent struct {
	conn *peer.Conn
	got  chan a2a.Payload
}

// startScripted subscribes an agent as clientID on topic.
func startScripted(t *testing.T, busURL, clientID, topic string) *scriptedAgent {
	t.Helper()
	conn, err := peer.Dial(t.Context(), busURL, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a := &scriptedAgent{conn: conn, got: make(chan a2a.Payload, 16)}
	err = conn.Subscribe(t.Context(), topic, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var p a2a.Payload
		if err := d.Decode(&p); err != nil {
			return peer.Result{}, err
		}
		a.got <- p
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startW starts a bus and an A2A server with agent "w" on agent:w, and
// a scripted agent there.
func startW(t *testing.T) (*fixture, *scriptedAgent) {
	t.Helper()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	return f, startScripted(t, f.bus.URL, "w", "agent:w")
}

// taskOf waits for the agent's next message and checks that it belongs
// to task.
func (a *scriptedAgent) taskOf(t *testing.T, task *spec.Task) a2a.Payload {
	t.Helper()
	p := a.next(t)
	if p.CorrelationID != string(task.ID) || p.A2A.TaskID != task.ID || p.ConversationID != task.ContextID {
		t.Fatalf("the agent got %+v, want a message of task %s", p, task.ID)
	}
	return p
}

// next waits for the agent's next message.
func (a *scriptedAgent) next(t *testing.T) a2a.Payload {
	t.Helper()
	select {
	case p := <-a.got:
		return p
	case <-time.After(bustest.Timeout):
		t.Fatalf("the agent got no message within %v", bustest.Timeout)
		return a2a.Payload{}
	}
}

// say publishes an answer on p's reply_to.
func (a *scriptedAgent) say(t *testing.T, p a2a.Payload, answer map[string]any) {
	t.Helper()
	res, err := a.conn.SendMessage(t.Context(), p.ReplyTo, answer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || !res.Acks[0].Processed {
		t.Fatalf("answer %v to %s not processed: %+v", answer, p.ReplyTo, res)
	}
}

// startEchoAgent runs examples/echo-agent as clientID on topic, as the
// spawner would.
func startEchoAgent(t *testing.T, busURL, clientID, topic string) {
	t.Helper()
	bin, err := bustest.EchoAgent()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "BUB_BUS_URL="+busURL, "BUB_AGENT_ID="+clientID, "BUB_DEFAULT_TOPIC="+topic)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), "echo-agent ready") {
				seen = true
				close(ready)
			}
			select {
			case lines <- sc.Text():
			default: // the log is for a failure's message only
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range lines {
		}
		cmd.Wait()
	})
	select {
	case <-ready:
	case <-time.After(bustest.Timeout):
		var log []string
		for len(lines) > 0 {
			log = append(log, <-lines)
		}
		t.Fatalf("echo-agent not ready within %v; its log: %s", bustest.Timeout, strings.Join(log, "\n"))
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
