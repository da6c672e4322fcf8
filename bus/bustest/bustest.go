// Package bustest runs a real bus on loopback for tests, and a raw
// JSON-RPC client that speaks to it frame by frame: tests can send any
// bytes, read every frame, and answer processMessage calls, with no bus
// code in between.
package bustest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/admin"
	"github.com/bub-bus/bub/bus/httpapi"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Timeout bounds every wait in this package, so a broken bus fails a test
// instead of hanging it.
const Timeout = 10 * time.Second

// LongTimeout bounds the waits that may cross a cluster's nodes: a POST
// that another node answers, spans exported from several.
const LongTimeout = 30 * time.Second

// Server is a bus served over loopback HTTP.
type Server struct {
	*bus.Server
	HTTP *httptest.Server
	// Store is the bus's store: the one in the options, else a fresh
	// in-memory one.
	Store *store.Store
	// URL is the WebSocket URL peers dial.
	URL string

	// stopServing stops an in-memory bus's HTTP server (StartInMemory);
	// nil for one on loopback, whose HTTP is closed instead.
	stopServing func()
}

// Start starts a bus with opts on 127.0.0.1 and stops it when the test
// ends. Its logs are discarded unless opts names a Logger.
func Start(t testing.TB, opts *bus.Options) *Server {
	t.Helper()
	o := testOptions(opts)
	s, err := Serve(&o)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	s.Store = o.Store
	t.Cleanup(func() { s.Stop(Timeout) })
	return s
}

// StartExtended is Start with the extensions extend makes for the bus's
// store (opts' Store, else the fresh in-memory one): for add-ons that
// keep their records beside the bus's. Each start makes its own.
func StartExtended(t testing.TB, opts *bus.Options, extend func(st *store.Store) []bus.Extension) *Server {
	t.Helper()
	o := testOptions(opts)
	o.Extensions = append(slices.Clip(o.Extensions), extend(o.Store)...)
	return Start(t, &o)
}

// testOptions returns a copy of opts (nil: the defaults) with the logs
// discarded unless it names a Logger, and a fresh in-memory store unless
// it names a Store.
func testOptions(opts *bus.Options) bus.Options {
	var o bus.Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Store == nil {
		o.Store = store.OpenMemory()
	}
	return o
}

// Serve makes a bus with o and serves it on loopback, for a caller that
// stops it (Stop) itself: Start is this for a test.
func Serve(o *bus.Options) (*Server, error) {
	srv, err := bus.New(extended(o))
	if err != nil {
		return nil, err
	}
	hs := httptest.NewUnstartedServer(srv)
	srv.ConfigureHTTP(hs.Config)
	hs.Listener = srv.Listener(hs.Listener, nil)
	hs.Start()
	return &Server{Server: srv, HTTP: hs, URL: "ws" + strings.TrimPrefix(hs.URL, "http") + "/"}, nil
}

// extended is o with the add-ons bub serve wires: a test bus serves what
// bub serve does. o's own extensions come first; o is not changed, so
// that a node restarted with it gets each add-on once.
func extended(o *bus.Options) *bus.Options {
	e := *o
	e.Extensions = append(slices.Clip(o.Extensions), httpapi.API{}, admin.Extension{})
	return &e
}

// Stop shuts the bus down, waiting at most timeout for it, and closes its
// listener.
func (s *Server) Stop(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.Shutdown(ctx)
	if s.stopServing != nil {
		s.stopServing()
		return
	}
	s.HTTP.Close()
}

// Response is a JSON-RPC response as read off the wire.
type Response struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

// ProcessFunc answers a processMessage call. It returns the result to
// send, or a *protocol.Error to answer with an error.
type ProcessFunc func(p protocol.ProcessMessageParams) any

// Client is a raw WebSocket JSON-RPC client. Calls made with Call get their
// responses; processMessage requests go to the function set with
// OnProcess; every other frame is kept for Recv.
type Client struct {
	t  testing.TB
	WS *websocket.Conn

	frames chan []byte
	done   chan struct{}
	// CloseErr is the error the read loop ended with, once done is
	// closed.
	CloseErr error

	// mu guards the fields below.
	mu      sync.Mutex
	nextID  int
	pending map[string]chan Response
	process ProcessFunc
}

// DialWS opens a WebSocket to url presenting token (none when empty); a
// refused upgrade's error names the HTTP status.
func DialWS(url, token string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	opts := &websocket.DialOptions{HTTPClient: httpClient(url)}
	if token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	}
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	return ws, nil
}

// Dial connects a raw client to url; it is closed when the test ends.
func Dial(t testing.TB, url string) *Client {
	t.Helper()
	return DialToken(t, url, "")
}

// DialToken is Dial presenting token as "Authorization: Bearer" (none
// when empty).
func DialToken(t testing.TB, url, token string) *Client {
	t.Helper()
	ws, err := DialWS(url, token)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	ws.SetReadLimit(-1)
	c := &Client{t: t, WS: ws, frames: make(chan []byte, 1024), done: make(chan struct{}), pending: make(map[string]chan Response)}
	go c.readLoop()
	t.Cleanup(func() { _ = ws.CloseNow() })
	return c
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		_, data, err := c.WS.Read(context.Background())
		if err != nil {
			c.CloseErr = err
			return
		}
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(data, &head) == nil {
			if head.Method == "" && len(head.ID) > 0 {
				c.mu.Lock()
				ch := c.pending[string(head.ID)]
				delete(c.pending, string(head.ID))
				c.mu.Unlock()
				if ch != nil {
					var r Response
					_ = json.Unmarshal(data, &r)
					ch <- r
					continue
				}
			}
			c.mu.Lock()
			process := c.process
			c.mu.Unlock()
			if head.Method == protocol.MethodProcessMessage && process != nil {
				go c.answer(head.ID, head.Params, process)
				continue
			}
		}
		c.frames <- data
	}
}

func (c *Client) answer(id, params json.RawMessage, process ProcessFunc) {
	// Read in place (the read loop's decode checked the message), so a
	// large payload is not scanned and copied twice more: under -race,
	// a fan-out of large messages is mostly this client's JSON.
	p, _ := protocol.ScanProcessMessage(params)
	out := process(p)
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if e, ok := out.(*protocol.Error); ok {
		msg["error"] = e
	} else {
		msg["result"] = out
	}
	data, _ := json.Marshal(msg)
	_ = c.WS.Write(context.Background(), websocket.MessageText, data)
}

// OnProcess sets the function that answers processMessage calls.
func (c *Client) OnProcess(f ProcessFunc) {
	c.mu.Lock()
	c.process = f
	c.mu.Unlock()
}

// Send writes one raw text frame.
func (c *Client) Send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.WS.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("bustest: send %s: %v", frame, err)
	}
}

// Recv returns the next frame not taken by Call or OnProcess, failing the
// test after Timeout.
func (c *Client) Recv() []byte {
	c.t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-c.done:
		c.t.Fatalf("bustest: connection closed while waiting for a frame: %v", c.CloseErr)
	case <-time.After(Timeout):
		c.t.Fatalf("bustest: no frame within %s", Timeout)
	}
	return nil
}

// RecvResponse returns the next frame not taken by Call or OnProcess
// as the JSON-RPC response it must be: the answer to a request written
// with Send. A frame that is not one (a call or notification from the
// bus, a batch's array) fails the test, saying what came instead.
func (c *Client) RecvResponse() Response {
	c.t.Helper()
	frame := c.Recv()
	r, ok := decodeResponse(frame)
	if !ok {
		c.t.Fatalf("bustest: want a JSON-RPC response, got %s", frame)
	}
	return r
}

// RecvBatch is RecvResponse for the answer to a batch written with
// Send: its responses, in the order the bus wrote them.
func (c *Client) RecvBatch() []Response {
	c.t.Helper()
	frame := c.Recv()
	var raws []json.RawMessage
	if err := json.Unmarshal(frame, &raws); err != nil {
		c.t.Fatalf("bustest: want a batch of JSON-RPC responses, got %s", frame)
	}
	rs := make([]Response, len(raws))
	for i, raw := range raws {
		r, ok := decodeResponse(raw)
		if !ok {
			c.t.Fatalf("bustest: want a batch of JSON-RPC responses, got %s in %s", raw, frame)
		}
		rs[i] = r
	}
	return rs
}

// RecvResult is RecvResponse that fails the test on an error response
// and decodes the result into out (if not nil), as MustCall does.
func (c *Client) RecvResult(out any) {
	c.t.Helper()
	c.mustResult("the request sent", c.RecvResponse(), out)
}

// decodeResponse decodes frame as a JSON-RPC response: an object with
// an id (null counts: the answer to a request too broken to have one),
// no method, and a result or an error.
func decodeResponse(frame []byte) (Response, bool) {
	var r struct {
		Response
		Method string `json:"method"`
	}
	if json.Unmarshal(frame, &r) != nil || r.Method != "" || len(r.ID) == 0 || (r.Result == nil && r.Error == nil) {
		return Response{}, false
	}
	return r.Response, true
}

// RecvWithin is Recv that returns an error instead of failing the test,
// so that the caller can say which step waited in vain.
func (c *Client) RecvWithin(d time.Duration) ([]byte, error) {
	select {
	case f := <-c.frames:
		return f, nil
	case <-c.done:
		return nil, fmt.Errorf("connection closed while waiting for a frame: %v", c.CloseErr)
	case <-time.After(d):
		return nil, fmt.Errorf("no frame within %s", d)
	}
}

// NoFrame fails the test if a frame arrives within d.
func (c *Client) NoFrame(d time.Duration) {
	c.t.Helper()
	select {
	case f := <-c.frames:
		c.t.Fatalf("bustest: unexpected frame %s", f)
	case <-time.After(d):
	}
}

// Closed waits for the bus to close the connection and returns the close
// status it sent.
func (c *Client) Closed() websocket.StatusCode {
	c.t.Helper()
	select {
	case <-c.done:
		return websocket.CloseStatus(c.CloseErr)
	case <-time.After(Timeout):
		c.t.Fatalf("bustest: connection still open after %s", Timeout)
	}
	return -1
}

// NoResponse is the code of the Response that Call returns when the
// connection closed or no response came within Timeout.
const NoResponse = -1

// Call sends a request and waits for its response. It is safe to use
// from several goroutines. When no response comes, the Response's error
// has code NoResponse; the test is not failed, since a test may be
// killing the bus on purpose.
func (c *Client) Call(method string, params any) Response {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := fmt.Sprintf(`"bustest-%d"`, c.nextID)
	ch := make(chan Response, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method}
	if params != nil {
		msg["params"] = params
	}
	data, _ := json.Marshal(msg)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.WS.Write(ctx, websocket.MessageText, data); err != nil {
		return Response{Error: &protocol.Error{Code: NoResponse, Message: fmt.Sprintf("%s: %v", method, err)}}
	}
	select {
	case r := <-ch:
		return r
	case <-c.done:
		// The answer may have come just before the close (as -32009
		// does before 4006); select picks at random among ready cases.
		select {
		case r := <-ch:
			return r
		default:
		}
		return Response{Error: &protocol.Error{Code: NoResponse, Message: fmt.Sprintf("%s: connection closed: %v", method, c.CloseErr)}}
	case <-time.After(Timeout):
		return Response{Error: &protocol.Error{Code: NoResponse, Message: fmt.Sprintf("%s: no response within %s", method, Timeout)}}
	}
}

// MustCall is Call that fails the test on an error response and decodes
// the result into out (if not nil).
func (c *Client) MustCall(method string, params any, out any) {
	c.t.Helper()
	c.mustResult(fmt.Sprintf("%s %v", method, params), c.Call(method, params), out)
}

// mustResult fails the test if r, the answer to what, is an error, and
// decodes its result into out (if not nil).
func (c *Client) mustResult(what string, r Response, out any) {
	c.t.Helper()
	if r.Error != nil {
		c.t.Fatalf("bustest: %s: error %d: %s", what, r.Error.Code, r.Error.Message)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			c.t.Fatalf("bustest: %s: decode result %s: %v", what, r.Result, err)
		}
	}
}

// Initialize sends initialize as clientID.
func (c *Client) Initialize(clientID string) protocol.InitializeResult {
	c.t.Helper()
	var r protocol.InitializeResult
	c.MustCall(protocol.MethodInitialize, protocol.InitializeParams{ClientID: clientID}, &r)
	return r
}

// Subscribe subscribes to pattern under policy ("" for the default).
func (c *Client) Subscribe(pattern string, policy protocol.Policy) {
	c.t.Helper()
	c.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: pattern, Policy: policy}, nil)
}

// Publish sends a message of the given type to topic and returns the
// result.
func (c *Client) Publish(topic, payloadType string) protocol.SendMessageResult {
	c.t.Helper()
	var r protocol.SendMessageResult
	c.MustCall(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]any{"type": payloadType}}, &r)
	return r
}

// Connect dials url, initializes as clientID, and answers every
// processMessage with process.
func Connect(t testing.TB, url, clientID string, process ProcessFunc) *Client {
	t.Helper()
	c := Dial(t, url)
	c.OnProcess(process)
	c.Initialize(clientID)
	return c
}

// Processed answers every delivery with processed: true.
func Processed(protocol.ProcessMessageParams) any {
	return protocol.ProcessMessageResult{Processed: true}
}
