package bus

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// The HTTP API publishes as sendMessage does, for callers that speak
// HTTP only (docs/PROTOCOL.md, "HTTP binding"): the same credential,
// grant, limits and checks, through the same route and admission path.
const (
	// PathMessages publishes one message per POST.
	PathMessages = "/v1/messages"
	// PathOpenAPI serves the API's OpenAPI 3.1 document.
	PathOpenAPI = "/v1/openapi.json"
)

// maxHTTPPublishers bounds the publishers the HTTP API keeps; beyond it
// they are forgotten all at once, their rate buckets full again.
const maxHTTPPublishers = 4096

//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers the OpenAPI document.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// httpPublishers are the stand-in connections HTTP publishes go
// through, one per identity and clientId, so that the publish rate and
// the publisher's order hold across requests as on one WebSocket.
type httpPublishers struct {
	mu  sync.Mutex
	all map[string]*httpPublisher
	// keys are the idempotency keys being answered.
	keys map[string]*keyLock
}

// httpPublisher is one of them; order serializes its routing, which a
// WebSocket connection's read loop does for it.
type httpPublisher struct {
	order sync.Mutex
	c     *conn
}

// httpError is the body of an HTTP API error: the JSON-RPC error object
// the WebSocket API would answer.
type httpError struct {
	Error *protocol.Error `json:"error"`
}

// statusOf is the HTTP status of a JSON-RPC error code.
func statusOf(code int64) int {
	switch code {
	case protocol.CodeUnauthorized:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeRateLimited, protocol.CodeTooManyRequests, protocol.CodeLimitReached:
		return http.StatusTooManyRequests
	case protocol.CodeShuttingDown:
		return http.StatusServiceUnavailable
	case protocol.CodeInternalError:
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// writeError answers err as JSON with its status; a rate-limited answer
// says when to retry in Retry-After too.
func writeError(w http.ResponseWriter, status int, err error) {
	perr := protocol.WireError(err)
	if status == 0 {
		status = statusOf(perr.Code)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		retry := int64(1)
		if d, ok := perr.Data.(rateLimitedData); ok {
			retry = max(1, (d.RetryAfterMS+999)/1000)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bub"`)
	}
	writeJSON(w, status, httpError{Error: perr})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// methodNotAllowed answers 405 naming the methods allowed.
func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, protocol.Errorf(protocol.ErrMethodNotFound, "this path takes %s", allow))
}

// publishAnswer is the body of a 201.
type publishAnswer struct {
	MessageID string `json:"messageId"`
	// Result is sendMessage's result, with ?wait=ack only.
	Result *protocol.SendMessageResult `json:"result,omitempty"`
}

// serveMessages publishes the message a POST carries.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	if err := s.checkBrowser(r); err != nil {
		writeError(w, 0, err)
		return
	}
	cred, err := bearer(r)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		writeError(w, 0, err)
		return
	}
	body, err := readBody(w, r, s.opts.MaxMessageBytes)
	if err != nil {
		status := 0
		if errors.As(err, new(*http.MaxBytesError)) {
			status = http.StatusRequestEntityTooLarge
			err = protocol.Errorf(protocol.ErrLimitReached, "body is more than %d bytes (--max-message-bytes)", s.opts.MaxMessageBytes)
		}
		writeError(w, status, err)
		return
	}
	var head struct {
		ClientID string          `json:"clientId"`
		Meta     json.RawMessage `json:"meta"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		writeError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "clientId must be a string"))
		return
	}
	p, err := s.httpPublisher(cred, head.ClientID, r.RemoteAddr)
	if err != nil {
		writeError(w, 0, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if _, ok := r.Header["Idempotency-Key"]; !ok {
		// Or in meta, as on sendMessage.
		if key, err = idempotencyKeyOf(head.Meta); err != nil {
			writeError(w, 0, err)
			return
		}
	}
	if key == "" && r.Header["Idempotency-Key"] == nil {
		answer, err := s.publishHTTP(p, body, r.URL.Query().Get("wait") == "ack", r.RemoteAddr, r.Header)
		if err != nil {
			writeError(w, 0, err)
			return
		}
		writeJSON(w, http.StatusCreated, answer)
		return
	}
	s.publishIdempotent(w, r, p, key, body)
}

// readBody reads a POST's body, at most limit bytes, and checks it is a
// JSON object.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return nil, err
		}
		return nil, protocol.Errorf(protocol.ErrParse, "read body: %v", err)
	}
	return parseBody(buf.Bytes())
}

// parseBody checks that body is a JSON object: sendMessage's params.
func parseBody(body []byte) ([]byte, error) {
	if !json.Valid(body) {
		return nil, protocol.Errorf(protocol.ErrParse, "body is not valid JSON; send {\"topic\": ..., \"payload\": ...}")
	}
	if !protocol.IsObject(body) {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "body must be a JSON object {\"topic\": ..., \"payload\": ...}")
	}
	return body, nil
}

// bearer reads the request's credential: a bearer token, and a verified
// client certificate's name.
func bearer(r *http.Request) (credential, error) {
	var cred credential
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cred.certCN = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return cred, protocol.Errorf(protocol.ErrUnauthorized, "the Authorization header must be \"Bearer TOKEN\"")
		}
		cred.token = strings.TrimSpace(token)
	}
	return cred, nil
}

// checkBrowser refuses a browser's request (one with Origin) whose Host
// is not an address of this bus (DNS rebinding) or whose Origin is
// neither that host nor one of Options.OriginPatterns, as the WebSocket
// upgrade does.
func (s *Server) checkBrowser(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if !s.hostAllowed(r) {
		s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
		return protocol.Errorf(protocol.ErrForbidden, "Host %q is not an address this bus serves; an operator adds it with --hosts", r.Host)
	}
	u, err := url.Parse(origin)
	if err == nil && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	if err == nil {
		for _, p := range s.opts.OriginPatterns {
			if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
				return nil
			}
		}
	}
	s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
	return protocol.Errorf(protocol.ErrForbidden, "Origin %q is not allowed; an operator adds it with --allowed-origins", origin)
}

// httpPublisher authenticates cred as clientID (by default the
// credential's name, or "http" on an open bus), as initialize would for
// a publish-only connection, and returns the publisher it goes through.
func (s *Server) httpPublisher(cred credential, clientID, remote string) (*httpPublisher, error) {
	c := &conn{
		holding: holding{server: s, log: s.log.With("remote", remote, "api", "http"), subs: make(map[string]*subscription)},
		remote:  remote,
		slots:   make(chan struct{}, s.opts.MaxInFlight),
	}
	c.cred = cred
	a := s.auth.Load()
	if clientID == "" && a != nil {
		if pr, err := s.authenticate(a, cred); err == nil {
			clientID = pr.Name()
		}
	}
	if clientID == "" {
		clientID = "http"
	}
	if err := protocol.ValidateClientID(clientID); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidClientInfo, "%v", err)
	}
	if err := c.checkReservedClientID(clientID); err != nil {
		return nil, err
	}
	principal, access, err := c.authorizeAgainst(a, &protocol.InitializeParams{ClientID: clientID, PublishOnly: true})
	if err != nil {
		return nil, err
	}
	name := clientID
	if principal != nil {
		name = principal.Name() + "\x00" + clientID
	}
	h := &s.http
	h.mu.Lock()
	p := h.all[name]
	if p == nil {
		if h.all == nil || len(h.all) >= maxHTTPPublishers {
			h.all = make(map[string]*httpPublisher)
		}
		c.cid = s.connSeq.Add(1)
		// closed: it holds no subscription and arms no expiry timer; each
		// request authenticates again.
		c.closed, c.initialized, c.publishOnly, c.clientID = true, true, true, clientID
		p = &httpPublisher{c: c}
		h.all[name] = p
	}
	h.mu.Unlock()
	p.c.mu.Lock()
	p.c.setAccessLocked(principal, access)
	p.c.mu.Unlock()
	return p, nil
}

// publishHTTP publishes body (sendMessage's params) through p and
// returns the answer. Without wait it answers once the message is
// accepted: admitted and routed, or held or found with no subscriber;
// with it, once the walk is done, as sendMessage does. remote is the
// request's address, for the journal: p serves every request of its
// identity and clientId, from wherever they come. header's traceparent,
// if any, is the publish's parent span (trace.go).
func (s *Server) publishHTTP(p *httpPublisher, body []byte, wait bool, remote string, header http.Header) (*publishAnswer, error) {
	c := p.c
	select {
	case c.slots <- struct{}{}:
	default:
		return nil, protocol.Errorf(protocol.ErrTooManyRequests, "%d requests of this publisher already running; wait for their answers", cap(c.slots))
	}
	if err := s.beginRequest(); err != nil {
		<-c.slots
		return nil, err
	}
	// The slot and the running request are held until the walk is done,
	// answered or not, as on a WebSocket connection.
	done := func() {
		s.requests.Done()
		<-c.slots
	}
	p.order.Lock()
	out, err := c.route(&rpcstream.Request{Method: protocol.MethodSendMessage, Params: body, ID: "http"})
	p.order.Unlock()
	if err == nil && out.callback != "" {
		out.pass()
		err = protocol.Errorf(protocol.ErrInvalidParams, "a tool posts its events to %s{id}, not to %s", protocol.PathCallbacks, PathMessages)
	}
	if err != nil {
		done()
		return nil, err
	}
	if err := out.admit(); err != nil {
		out.pass()
		done()
		return nil, err
	}
	out.remote = remote
	out.accepted()
	s.traceHTTP(&out.message, header)
	answer := &publishAnswer{MessageID: out.message.ID}
	walk := func() (*protocol.SendMessageResult, error) {
		defer done()
		defer out.pass()
		return s.publishRouted(&out.message, out.chain, out.tickets, true)
	}
	if !wait && len(out.chain) > 0 {
		go func() { _, _ = walk() }()
		return answer, nil
	}
	result, err := walk()
	if err != nil {
		return nil, err
	}
	if wait {
		answer.Result = result
	}
	return answer, nil
}

// publishIdempotent publishes a request that carries an Idempotency-Key
// (idempotently); a key used for another body is refused with 409.
func (s *Server) publishIdempotent(w http.ResponseWriter, r *http.Request, p *httpPublisher, key string, body []byte) {
	p.c.mu.Lock()
	identity := p.c.limitKeyLocked()
	p.c.mu.Unlock()
	wait := r.URL.Query().Get("wait") == "ack"
	sum := sha256.Sum256(append([]byte(strconv.FormatBool(wait)+"\n"), body...))
	answer, replayed, err := s.idempotently(identity, key, sum[:], func() (any, error) {
		return s.publishHTTP(p, body, wait, r.RemoteAddr, r.Header)
	})
	switch {
	case errors.Is(err, errKeyReused):
		writeError(w, http.StatusConflict, err)
		return
	case err != nil:
		writeError(w, 0, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, answer)
}
