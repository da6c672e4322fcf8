package bus

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/bub-bus/bub/auth"
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

// httpPublishers are the publishers HTTP publishes go through, one per
// identity and clientId, so that the publisher's order holds across
// requests as on one WebSocket. An identity keeps at most
// Limits.MaxHTTPPublishersPerIdentity of them, and the bus
// maxHTTPPublishers: beyond either, the least recently used is
// forgotten (its next request makes it again), never all at once. The
// publish rate is the identity's, not a publisher's (limits.go), so
// forgetting one refills no bucket.
type httpPublishers struct {
	// mu guards all.
	mu  sync.Mutex
	all map[httpPublisherKey]*Publisher
}

// httpPublisherKey names an HTTP publisher: the identity (its limit
// key) and the clientId.
type httpPublisherKey struct{ identity, clientID string }

// maxHTTPPublishers bounds the publishers the HTTP API keeps in all.
const maxHTTPPublishers = 4096

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

// WriteError answers err over HTTP as every door of the bus does: a
// JSON body {"error": ...} with the JSON-RPC error, its status from the
// error's code when status is 0, and Retry-After on 429 and 503.
func WriteError(w http.ResponseWriter, status int, err error) { writeError(w, status, err) }

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

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
	if _, ok := r.Header["Idempotency-Key"]; ok {
		err = CheckIdempotencyKey(key)
	} else {
		// Or in meta, as on sendMessage.
		key, err = idempotencyKeyOf(head.Meta)
	}
	if err != nil {
		writeError(w, 0, err)
		return
	}
	answer, replayed, err := s.publishHTTP(p, body, key, r.URL.Query().Get("wait") == "ack", r)
	switch {
	case errors.Is(err, ErrKeyReused):
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
	if err := checkUTF8("the body", body); err != nil {
		return nil, err
	}
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
func (s *Server) httpPublisher(cred credential, clientID, remote string) (*Publisher, error) {
	a := s.auth.Load()
	defaulted := clientID == ""
	var pr *auth.Principal
	if a != nil {
		var err error
		if pr, err = s.authenticate(a, cred); err != nil {
			s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
			return nil, httpUnauthorized(cred)
		}
		if defaulted {
			clientID = pr.Name()
		}
	}
	if clientID == "" {
		clientID = "http"
	}
	// A publisher not yet kept, to check the credential with.
	p := s.NewPublisher(clientID, "", remote, "remote", remote, "api", "http")
	c := p.c
	c.cred = cred
	if err := protocol.ValidateClientID(clientID); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidClientInfo, "%v", err)
	}
	if err := c.checkReservedClientID(clientID); err != nil {
		return nil, err
	}
	principal, access, err := c.authorizeAgainst(a, &protocol.InitializeParams{ClientID: clientID, PublishOnly: true})
	if err != nil {
		return nil, httpTerms(err, cred, pr, clientID, defaulted)
	}
	key := httpPublisherKey{clientID: clientID}
	if principal != nil {
		key.identity = principal.Name()
	}
	p = s.http.keep(key, p, s.limits().MaxHTTPPublishersPerIdentity)
	p.c.mu.Lock()
	p.c.setAccessLocked(principal, access)
	p.c.mu.Unlock()
	return p, nil
}

// httpTerms says err, a refusal of initialize's checks, in the HTTP
// API's terms: the header to send, the body's clientId to set.
func httpTerms(err error, cred credential, pr *auth.Principal, clientID string, defaulted bool) error {
	switch protocol.CodeOf(err) {
	case protocol.CodeUnauthorized:
		return httpUnauthorized(cred)
	case protocol.CodeForbidden:
		how := fmt.Sprintf("the body's \"clientId\" %q", clientID)
		if defaulted {
			how = fmt.Sprintf("%q, the credential's name (the body has no \"clientId\")", clientID)
		}
		allowed := "none"
		if pr != nil {
			allowed = strings.Join(pr.ClientIDs(), ", ")
		}
		return protocol.Errorf(protocol.ErrForbidden, "this credential may not publish as %s: its grant's client_ids (%s) do not allow it; set \"clientId\" in the body to one they do", how, allowed)
	}
	return err
}

// keep returns the publisher kept for key, keeping fresh if there is
// none; an identity past its bound, or the table past maxHTTPPublishers,
// forgets its least recently used.
func (h *httpPublishers) keep(key httpPublisherKey, fresh *Publisher, perIdentity int) *Publisher {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.all[key]; p != nil {
		return p
	}
	if h.all == nil {
		h.all = make(map[httpPublisherKey]*Publisher)
	}
	mine := 0
	for k := range h.all {
		if k.identity == key.identity {
			mine++
		}
	}
	if perIdentity >= 0 && mine >= perIdentity {
		h.forgetLRULocked(func(k httpPublisherKey) bool { return k.identity == key.identity })
	} else if len(h.all) >= maxHTTPPublishers {
		h.forgetLRULocked(func(httpPublisherKey) bool { return true })
	}
	h.all[key] = fresh
	return fresh
}

// forgetLRULocked forgets the least recently used publisher whose key
// is one of. The caller holds h.mu.
func (h *httpPublishers) forgetLRULocked(of func(httpPublisherKey) bool) {
	var oldest httpPublisherKey
	var used int64
	found := false
	for k, p := range h.all {
		if u := p.used.Load(); of(k) && (!found || u < used) {
			oldest, used, found = k, u, true
		}
	}
	if found {
		delete(h.all, oldest)
	}
}

// publishHTTP publishes body (sendMessage's params) through p and
// returns the answer (Publish); the body's idempotency key, from the
// Idempotency-Key header or meta.idempotency_key, makes a repeat publish
// nothing. remote is the request's address, for the journal: p serves
// every request of its identity and clientId, from wherever they come.
func (s *Server) publishHTTP(p *Publisher, body []byte, key string, wait bool, r *http.Request) (*publishAnswer, bool, error) {
	o := &PublishOptions{Wait: wait, Remote: r.RemoteAddr, Header: r.Header, Key: key}
	if key != "" {
		// The wait is part of the request: a repeat with another wait
		// would get another answer.
		sum := sha256.Sum256(append([]byte(strconv.FormatBool(wait)+"\n"), body...))
		o.Sum = sum[:]
	}
	pub, err := s.Publish(r.Context(), p, body, o)
	if err != nil {
		return nil, false, err
	}
	answer := &publishAnswer{MessageID: pub.MessageID}
	if wait {
		answer.Result = pub.Result
	}
	return answer, pub.Replayed, nil
}
