package bus

import (
	"net/http"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// How an add-on that serves HTTP checks a request, and answers one, as
// the core does: against the Authenticator in force (a reload applies to
// the next check), counting what it refuses in the core's metrics, and
// answering in the HTTP API's error form.

// A Credential is what a request presented: a bearer token, a verified
// client certificate's name. An add-on may keep it, to check it again
// later (a reload may revoke it); the token is never logged.
type Credential struct {
	c credential
}

// CredentialOf is the credential of r's verified client certificate, if
// any, with token: one a form carried (a login), not a header.
func CredentialOf(r *http.Request, token string) Credential {
	c, _ := bearer(r)
	c.token = token
	return Credential{c: c}
}

// Authenticate checks cred now and returns who presented it: nil on an
// open bus, which checks no credential. A refusal is counted in
// bub_auth_refusals_total and is a -32001.
func (s *Server) Authenticate(cred Credential) (*auth.Principal, error) {
	a := s.auth.Load()
	if a == nil {
		return nil, nil
	}
	p, err := s.authenticate(a, cred.c)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return nil, protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted")
	}
	return p, nil
}

// RefusedAdmin counts, in bub_auth_refusals_total, a request refused
// because its credential lacks admin.
func (s *Server) RefusedAdmin() {
	s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
}

// CheckBrowser refuses a browser's request (one with Origin) whose Host
// is not an address of this bus (DNS rebinding) or whose Origin is not
// allowed (Options.OriginPatterns), as the WebSocket upgrade does; the
// refusal is counted and is a -32003.
func (s *Server) CheckBrowser(r *http.Request) error {
	return s.checkBrowser(r)
}

// PublisherFor authenticates cred as clientID, as initialize does for a
// publish-only connection, and returns the publisher it publishes
// through: the HTTP API's, kept per identity and clientId, so that a
// door publishing for a browser shares that identity's bounds.
func (s *Server) PublisherFor(cred Credential, clientID, remote string) (*Publisher, error) {
	return s.httpPublisher(cred.c, clientID, remote)
}

// RateLimited is a -32012 with message, answered over HTTP as 429 with
// Retry-After (WriteError).
func RateLimited(message string, retryAfterMS int64) error {
	return &protocol.Error{Code: protocol.CodeRateLimited, Message: message, Data: rateLimitedData{RetryAfterMS: retryAfterMS}}
}

// WriteError answers err as the HTTP API does: JSON {"error": ...} with
// status, or with the status its code maps to when status is 0.
func WriteError(w http.ResponseWriter, status int, err error) {
	writeError(w, status, err)
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	writeJSON(w, status, v)
}
