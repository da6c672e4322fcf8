package httpapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

const (
	// PathMessages publishes one message per POST.
	PathMessages = "/v1/messages"
	// PathOpenAPI serves the API's OpenAPI 3.1 document.
	PathOpenAPI = "/v1/openapi.json"
)

//go:embed openapi.json
var openAPI []byte

// API is the HTTP API, an extension: add API{} to
// bus.Options.Extensions. One API may extend several buses (a cluster's
// nodes in one process): each gets its own publishers.
type API struct{}

// Extend registers the API's paths on s.
func (API) Extend(s *bus.Server) error {
	d := &door{s: s}
	if err := s.Handle(PathMessages, http.HandlerFunc(d.serveMessages)); err != nil {
		return err
	}
	if err := s.Handle(PathOpenAPI, http.HandlerFunc(serveOpenAPI)); err != nil {
		return err
	}
	return nil
}

// door is the API on one bus.
type door struct {
	s          *bus.Server
	publishers publishers
}

// serveOpenAPI answers the OpenAPI document.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpjson.MethodNotAllowed(w, "GET, HEAD")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// serveMessages publishes the message a POST carries.
func (d *door) serveMessages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		httpjson.MethodNotAllowed(w, http.MethodPost)
		return
	}
	principal, err := d.s.Authenticate(r)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	limit := d.s.Options().MaxMessageBytes
	body, err := readBody(w, r, limit)
	if err != nil {
		status := 0
		if errors.As(err, new(*http.MaxBytesError)) {
			status = http.StatusRequestEntityTooLarge
			err = protocol.Errorf(protocol.ErrLimitReached, "body is more than %d bytes (--max-message-bytes)", limit)
		}
		httpjson.WriteError(w, status, err)
		return
	}
	var head struct {
		ClientID string          `json:"clientId"`
		Meta     json.RawMessage `json:"meta"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrInvalidParams, "clientId must be a string"))
		return
	}
	p, err := d.publisher(principal, head.ClientID, r.RemoteAddr)
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if _, ok := r.Header["Idempotency-Key"]; ok {
		err = protocol.CheckIdempotencyKey(key)
	} else {
		// Or in meta, as on sendMessage.
		key, err = protocol.IdempotencyKeyOf(head.Meta)
	}
	if err != nil {
		httpjson.WriteError(w, 0, err)
		return
	}
	answer, replayed, err := d.publish(p, body, key, r.URL.Query().Get("wait") == "ack", r)
	switch {
	case errors.Is(err, bus.ErrKeyReused):
		httpjson.WriteError(w, http.StatusConflict, err)
		return
	case err != nil:
		httpjson.WriteError(w, 0, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	httpjson.Write(w, http.StatusCreated, answer)
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
	if err := rpcstream.CheckUTF8("the body", body); err != nil {
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

// publisher returns the publisher principal (Authenticate's) publishes
// through as clientID (by default the credential's name, or "http" on an
// open bus), once the grant allows it, as initialize would for a
// publish-only connection.
func (d *door) publisher(principal *auth.Principal, clientID, remote string) (*bus.Publisher, error) {
	defaulted := clientID == ""
	if defaulted && principal != nil {
		clientID = principal.Name()
	}
	if clientID == "" {
		clientID = "http"
	}
	access, err := d.s.Authorize(principal, clientID)
	if err != nil {
		return nil, httpTerms(err, principal, clientID, defaulted)
	}
	key := publisherKey{clientID: clientID}
	if principal != nil {
		key.identity = principal.Name()
	}
	p := d.publishers.get(key, d.s.Limits().MaxHTTPPublishersPerIdentity, func() *bus.Publisher {
		return d.s.NewPublisher(clientID, "", remote, "remote", remote, "api", "http")
	})
	// The grant in force now: a reload may have changed it since the
	// publisher was made.
	p.SetGrant(principal, access)
	return p, nil
}

// httpTerms says err, a refusal of Authorize, in the HTTP API's terms:
// the body's clientId to set.
func httpTerms(err error, principal *auth.Principal, clientID string, defaulted bool) error {
	if protocol.CodeOf(err) != protocol.CodeForbidden {
		return err
	}
	how := fmt.Sprintf("the body's \"clientId\" %q", clientID)
	if defaulted {
		how = fmt.Sprintf("%q, the credential's name (the body has no \"clientId\")", clientID)
	}
	allowed := "none"
	if principal != nil {
		allowed = strings.Join(principal.ClientIDs(), ", ")
	}
	return protocol.Errorf(protocol.ErrForbidden, "this credential may not publish as %s: its grant's client_ids (%s) do not allow it; set \"clientId\" in the body to one they do", how, allowed)
}

// publish publishes body (sendMessage's params) through p and returns
// the answer and whether it was replayed; key, the idempotency key (""
// for none), makes a repeat publish nothing. The request's address goes
// to the journal: p serves every request of its identity and clientId,
// from wherever they come.
func (d *door) publish(p *bus.Publisher, body []byte, key string, wait bool, r *http.Request) (*httpjson.Published, bool, error) {
	o := &bus.PublishOptions{Wait: wait, Remote: r.RemoteAddr, Header: r.Header, Key: key}
	if key != "" {
		// The wait is part of the request: a repeat with another wait
		// would get another answer.
		sum := sha256.Sum256(append([]byte(strconv.FormatBool(wait)+"\n"), body...))
		o.Sum = sum[:]
	}
	pub, err := d.s.Publish(r.Context(), p, body, o)
	if err != nil {
		return nil, false, err
	}
	answer := &httpjson.Published{MessageID: pub.MessageID}
	if wait {
		answer.Result = pub.Result
	}
	return answer, pub.Replayed, nil
}
